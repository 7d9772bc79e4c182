"""The SQLite store's committer alone: CPU µs per command in its thread, in process, with no
daemon, socket or engine.

The rows of ``bench_commands.py``'s commands (two events of about 100 bytes, a remembered
answer of about 300 and a summary, each command on its own combat's log), committed through
``Store.commit`` in group commits of ``--group`` commands, as the daemon's writers hand them
over under load. The figure is the CPU time (user and system) of the committer's thread per
command: what the SQL, its B-trees, the WAL and the fsync cost the daemon, whatever the disk's
latency. Beside it: the CPU of the store's checkpointer thread (where there is one), the wall
time per group commit (mostly the fsync's wait; median, p99 and max), and the bytes
and write calls per command (the WAL's frames, two calls each, and the checkpoints' pages),
which the load of a shared machine does not blur.

    python bench/bench_committer.py --groups 400 --group 50 --reps 5
    python bench/bench_committer.py --compare /tmp/tk-before   # A/B, repetitions alternating

The measurement runs in a child process whose ``PYTHONPATH`` starts with the daemon of
``TURNKEEPER_BENCH_CHECKOUT`` when it is set (as the other scripts); ``--compare DIR`` measures
DIR's too, in alternating repetitions, so both meet the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

WARMUP_GROUPS = 50
"""Group commits before the measured ones: the tables have a few levels and the WAL its size."""


def _event(n: int, at: float) -> list[dict[str, Any]]:
    """Two events shaped as ``apply_condition``'s: ``command_recorded`` and the condition."""
    return [
        {
            "event": "command_recorded",
            "command": "apply_condition",
            "actor": {"role": "narrator", "user": None, "via": None},
            "at": at,
        },
        {
            "event": "condition_applied",
            "condition": {
                "id": f"c{n}",
                "type": "custom",
                "target": "k",
                "source": None,
                "clocks": [{"anchor": "k", "boundary": "end", "remaining": 1, "skip": False}],
                "surprisers": [],
                "note": "",
            },
        },
    ]


async def _measure(data: Path, groups: int, size: int, combats: int) -> dict[str, float]:
    import asyncio

    import anyio

    from turnkeeper.store import Batch, Store

    store = Store.open(data)
    seqs = dict.fromkeys((f"w0-{i}" for i in range(combats)), 0)
    counter = [0]

    def batch(combat: str) -> Batch:
        counter[0] += 1
        n = counter[0]
        at = 1_800_000_000.0 + n / 1000
        first = seqs[combat] + 1
        events = tuple(_event(n, at))
        seqs[combat] += len(events)
        numbered = [{"seq": first + i, **e} for i, e in enumerate(events)]
        return Batch(
            combat_id=combat,
            first_seq=first,
            events=events,
            ruleset=None,
            request=("uid:0", f"{combat}-{n}"),
            response={
                "fingerprint": f"{n:032x}",
                "result": {"combat": combat, "seq": first + 1, "events": numbered},
            },
            at=at,
            summary={
                "ruleset": "marvel",
                "phase": "setup",
                "round": None,
                "seq": first + 1,
                "deadline": None,
            },
        )

    names = list(seqs)
    turn = [0]

    async def group() -> None:
        chosen = []
        for _ in range(size):
            chosen.append(names[turn[0] % len(names)])
            turn[0] += 1
        await asyncio.gather(*(store.commit(batch(c)) for c in chosen))

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(store.run)
            for combat in names:
                await store.commit(
                    Batch(combat, 1, (), "marvel", ("uid:0", f"{combat}-c"), {}, 1.0)
                )
            for _ in range(WARMUP_GROUPS):
                await group()
            (thread,) = (t for t in threading.enumerate() if t.name == "turnkeeper-committer")
            assert thread.ident is not None
            clock = time.pthread_getcpuclockid(thread.ident)
            before = store.transactions
            io = _io()
            cpu = time.clock_gettime(clock)
            aside = _aside_cpu()
            wall = time.perf_counter()
            times = []
            for _ in range(groups):
                started = time.perf_counter()
                await group()
                times.append(time.perf_counter() - started)
            cpu = time.clock_gettime(clock) - cpu
            aside = _aside_cpu() - aside
            wall = time.perf_counter() - wall
            io = {k: v - io[k] for k, v in _io().items()}
            transactions = store.transactions - before
            await store.stop()
    finally:
        store.close()
    return {
        "cpu_us": cpu / (groups * size) * 1e6,
        "wall_ms": wall / groups * 1e3,
        "p99_ms": sorted(times)[int(len(times) * 0.99)] * 1e3,
        "max_ms": max(times) * 1e3,
        "aside_us": aside / (groups * size) * 1e6,
        "per_transaction": groups * size / transactions,
        "kib": io["wchar"] / (groups * size) / 1024,
        "writes": io["syscw"] / (groups * size),
    }


def _aside_cpu() -> float:
    """CPU seconds of the store's other threads (its checkpointer's), 0 for a daemon that
    checkpoints inside its commits: beside the committer's, the rest of what the store costs."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.name == "turnkeeper-checkpointer" and thread.ident is not None:
            total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total


def _io() -> dict[str, int]:
    """This process's bytes written and write calls so far (``/proc/self/io``): the WAL's
    frames and the checkpoints' pages, a measure of the disk work that the machine's load does
    not blur as it does CPU time."""
    with open("/proc/self/io") as f:
        rows = dict(line.split(": ") for line in f.read().splitlines())
    return {"wchar": int(rows["wchar"]), "syscw": int(rows["syscw"])}


def _child(groups: int, size: int, combats: int) -> dict[str, float]:
    import anyio

    with tempfile.TemporaryDirectory(prefix="bench-committer-") as scratch:
        return anyio.run(_measure, Path(scratch) / "data", groups, size, combats)


def main() -> None:
    parser = argparse.ArgumentParser(description="the SQLite committer's CPU µs per command")
    parser.add_argument("--groups", type=int, default=400, help="group commits measured")
    parser.add_argument("--group", type=int, default=50, help="commands per group commit")
    parser.add_argument("--combats", type=int, default=50, help="combats the commands go to")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--compare", metavar="DIR", help="another checkout, measured alternately")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.groups, args.group, args.combats)))
        return
    import tkbench as tk

    print(tk.machine())
    this = os.environ.get(tk.CHECKOUT_VARIABLE)
    checkouts = {this or "this checkout": this}
    if args.compare:
        checkouts[args.compare] = args.compare
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    argv = [sys.executable, __file__, "--child", "--groups", str(args.groups)]
    argv += ["--group", str(args.group), "--combats", str(args.combats)]
    for _ in range(args.reps):
        for name, checkout in checkouts.items():
            done = subprocess.run(
                argv,
                env=tk.checkout_env(checkout),
                capture_output=True,
                text=True,
                check=True,
                timeout=tk.WORKER_TIMEOUT,
            )
            runs[name].append(json.loads(done.stdout))
    print(
        f"\n{args.groups} group commits of {args.group} commands a repetition;"
        f" medians of {args.reps} repetitions\n"
    )
    print(
        tk.table(
            [
                "checkout",
                "committer CPU µs per command",
                "each repetition",
                "checkpointer CPU µs per command",
                "ms per group",
                "p99 ms",
                "max ms",
                "KiB written per command",
                "write calls per command",
            ],
            [
                [
                    name,
                    tk.fmt(tk.median([r["cpu_us"] for r in reps]), 1),
                    " ".join(f"{r['cpu_us']:.1f}" for r in reps),
                    tk.fmt(tk.median([r.get("aside_us", 0.0) for r in reps]), 1),
                    tk.fmt(tk.median([r["wall_ms"] for r in reps]), 2),
                    tk.fmt(tk.median([r["p99_ms"] for r in reps]), 2),
                    tk.fmt(tk.median([r["max_ms"] for r in reps]), 2),
                    tk.fmt(tk.median([r["kib"] for r in reps]), 2),
                    tk.fmt(tk.median([r["writes"] for r in reps]), 2),
                ]
                for name, reps in runs.items()
            ],
        )
    )


if __name__ == "__main__":
    main()
