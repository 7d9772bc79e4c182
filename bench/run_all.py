"""Run every benchmark, one after the other, with the settings docs/benchmarks.md reports.

    . .venv/bin/activate && python bench/run_all.py [--quick] [--only reads commands ...]
    python bench/run_all.py --only issue11     # issue 11's speed targets only

Each benchmark starts its own daemon (and echo baseline) as subprocesses on Unix sockets under
$TMPDIR/turnkeeper-bench-<uid>/ and prints its own figures table. ``--quick`` shortens every run
(for checking the scripts, not for figures).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from tkbench import BENCH

RUNS: dict[str, tuple[list[str], list[str]]] = {
    # name: (full arguments, --quick arguments)
    "reads": (["--seconds", "5", "--reps", "3"], ["--seconds", "1", "--reps", "1"]),
    "commands": (["--seconds", "5", "--reps", "3"], ["--seconds", "1", "--reps", "1"]),
    "engine": (["--commands", "5000", "--reps", "5"], ["--commands", "500", "--reps", "1"]),
    "committer": (
        ["--groups", "400", "--group", "50", "--reps", "5"],
        ["--groups", "20", "--group", "10", "--reps", "1"],
    ),
    "plugins": (["--seconds", "5", "--reps", "3"], ["--seconds", "1", "--reps", "1"]),
    "hook_calls": (["--calls", "5000", "--reps", "3"], ["--calls", "200", "--reps", "1"]),
    "websocket": (["--seconds", "5", "--reps", "3"], ["--seconds", "1", "--reps", "1"]),
    "latency": (["--seconds", "5", "--reps", "3"], ["--seconds", "1", "--reps", "1"]),
    "fanout": (["--commands", "100", "--reps", "3"], ["--commands", "10", "--reps", "1"]),
    "peer_fanout": (
        ["--views", "10", "250", "500", "--updates", "100", "--reps", "3"],
        ["--views", "500", "--updates", "20", "--reps", "1"],
    ),
    "scale": (
        ["--combats", "100", "50000", "100000", "--seconds", "5", "--reps", "3"],
        ["--combats", "100", "2000", "--seconds", "1", "--reps", "1"],
    ),
    "memory": (
        ["--combats", "10000", "--busy", "200", "--tracemalloc", "--reps", "1"],
        ["--combats", "300", "--busy", "10", "--tracemalloc", "--traced-busy", "4", "--reps", "1"],
    ),
    "decode": (["--reps", "3"], ["--reps", "1", "--attackers", "1"]),
    "cluster": (
        ["--seconds", "3", "--reps", "3", "--failovers", "5"],
        [
            "--seconds",
            "1",
            "--reps",
            "1",
            "--failovers",
            "1",
            "--move-combats",
            "10",
            "--failover-combats",
            "5",
            "--held",
            "500",
            "--idle-seconds",
            "1",
        ],
    ),
    "recovery": (
        ["--events", "1000000", "--combats", "1000", "--reps", "3"],
        ["--events", "20000", "--combats", "20", "--reps", "1"],
    ),
    "startup": (["--reps", "15"], ["--reps", "2"]),
}
GROUPS = {
    "issue11": [
        "reads",
        "commands",
        "engine",
        "latency",
        "fanout",
        "peer_fanout",
        "scale",
        "memory",
    ],
}
"""Names ``--only`` also takes for several benchmarks: issue 11's speed targets."""
TIMEOUT = 900.0
"""Seconds one benchmark may run, its data building included, before it is stopped."""


def main() -> int:
    parser = argparse.ArgumentParser(description="run the Turnkeeper daemon benchmarks")
    parser.add_argument("--quick", action="store_true", help="short runs, to check the scripts")
    parser.add_argument("--only", nargs="+", choices=sorted([*RUNS, *GROUPS]), default=list(RUNS))
    args = parser.parse_args()
    names = [n for given in args.only for n in GROUPS.get(given, [given])]
    failed = []
    for name in dict.fromkeys(names):
        full, quick = RUNS[name]
        command = [
            sys.executable,
            str(BENCH / f"bench_{name}.py"),
            *(quick if args.quick else full),
        ]
        print(f"\n## {name}: {' '.join(command[1:])}\n", flush=True)
        started = time.monotonic()
        try:
            done = subprocess.run(command, timeout=TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            print(f"{name}: stopped after {TIMEOUT:g} s")
            failed.append(name)
            continue
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\n({name} took {time.monotonic() - started:.0f} s; loadavg {load})", flush=True)
        if done.returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
