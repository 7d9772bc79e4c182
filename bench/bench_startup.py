"""Cold start: wall and CPU time from spawning ``turnkeeper serve`` on an empty data dir to its
first answers on the Unix socket.

Each start gets a fresh, empty data dir and socket. From just before the spawn, the client
tries to connect every ``POLL`` until the socket accepts, then asks, one after the other,
``hello`` (the first answer any client gets), ``list_combats`` (the store read) and
``create_combat`` (the first command: the engine's deciding and a durable commit), timing each
answer from the spawn. The daemon's CPU up to the hello's answer and up to the command's is
the sum of its threads' run time (``/proc/<pid>/task/*/schedstat``, in nanoseconds, not the
10 ms ticks of ``/proc/<pid>/stat``). Each daemon is then killed (SIGKILL: how it stops is not
measured) and its directory removed.

With ``--compare DIR [DIR...]``, each DIR's daemon (its sources first on ``PYTHONPATH``) starts
in alternation with this checkout's (or ``TURNKEEPER_BENCH_CHECKOUT``'s), the order reversed
every repetition, so all meet the same machine load; the table gives medians and the first
checkout's ratio to each other's. One unmeasured start of each comes first: it writes the
checkout's bytecode caches, which a real start finds made (the daemons run without
``PYTHONDONTWRITEBYTECODE``).

``--importtime`` adds a start of each under ``python -X importtime`` (not timed): the modules
imported until the hello's answer and the sum of their own import times. ``--callgrind N`` adds
N starts of each under valgrind's callgrind (a few minutes each): the instructions run until the
hello's answer, which the machine's load does not change (what the daemon's background tasks
did before the hello came still moves it by a few percent).

    python bench/bench_startup.py --reps 15
    python bench/bench_startup.py --reps 15 --compare /tmp/tk-before --importtime
    python bench/bench_startup.py --reps 15 --compare /tmp/tk-main /tmp/tk-older --callgrind 1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tkbench as tk

from turnkeeper_sdk.client import Client

POLL = 0.001
"""Seconds between two attempts to connect: the wall figures are good to about this much."""
SLOW_START_TIMEOUT = 900.0
"""Seconds a start under valgrind may take to listen: it runs some 50 times slower."""
COMBAT = "cold"


@dataclass(frozen=True, slots=True)
class Start:
    """One start's figures, in milliseconds from the spawn."""

    hello_ms: float
    list_ms: float
    command_ms: float
    hello_cpu_ms: float
    command_cpu_ms: float


def _cpu_ms(pid: int) -> float:
    """The run time of the process's live threads so far (the first field of each thread's
    schedstat, in nanoseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return total / 1e6


def _connect(
    path: Path, process: subprocess.Popen[bytes], log: Path, timeout: float
) -> socket.socket:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited: {log.read_text(errors='replace')[-2000:]}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
        except OSError:
            sock.close()
            time.sleep(POLL)
            continue
        return sock
    raise RuntimeError(f"the daemon did not listen within {timeout} s")


def start(
    root: Path,
    env: dict[str, str] | None,
    *,
    wrapper: tuple[str, ...] = (),
    python_flags: tuple[str, ...] = (),
    at_hello: Callable[[int], object] | None = None,
) -> Start:
    """Start a daemon on a fresh empty data dir in ``root``, measure it, kill it. With
    ``at_hello`` (called with the daemon's pid), the daemon is killed once that returns after
    the hello's answer, and the other figures are NaN. ``wrapper`` comes before the Python
    executable on the command line (valgrind), ``python_flags`` after it."""
    server = tk.daemon(root)
    argv = [*wrapper, server.argv[0], *python_flags, *server.argv[1:]]
    server.socket_path.parent.mkdir(mode=0o700, parents=True)
    timeout = SLOW_START_TIMEOUT if wrapper else tk.START_TIMEOUT
    with server.log_path.open("wb") as log:
        spawned = time.perf_counter()
        process = subprocess.Popen(argv, stdout=log, stderr=log, env=env)
    try:
        sock = _connect(server.socket_path, process, server.log_path, timeout)
        with Client(sock, timeout=tk.CALL_TIMEOUT) as session:
            session.hello(name="bench")
            hello_ms = (time.perf_counter() - spawned) * 1e3
            hello_cpu_ms = _cpu_ms(process.pid)
            if at_hello is not None:
                at_hello(process.pid)
                nan = float("nan")
                return Start(hello_ms, nan, nan, hello_cpu_ms, nan)
            session.call("list_combats", limit=1)
            list_ms = (time.perf_counter() - spawned) * 1e3
            session.call("create_combat", request_id="c", combat_id=COMBAT, ruleset="marvel")
            command_ms = (time.perf_counter() - spawned) * 1e3
            command_cpu_ms = _cpu_ms(process.pid)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=tk.STOP_TIMEOUT)
    return Start(hello_ms, list_ms, command_ms, hello_cpu_ms, command_cpu_ms)


def imports(root: Path, env: dict[str, str] | None) -> tuple[int, float]:
    """The modules a start imports until the hello's answer and the sum of their own import
    times (ms), from ``-X importtime``'s lines in the daemon's log."""
    start(root, env, python_flags=("-X", "importtime"), at_hello=lambda pid: None)
    found = re.findall(r"^import time:\s+(\d+) \|", (root / "daemon.log").read_text(), re.M)
    return len(found), sum(int(us) for us in found) / 1e3


def instructions(root: Path, env: dict[str, str] | None) -> int:
    """The instructions a start runs until the hello's answer, all its threads together, under
    callgrind: its counters are dumped then (``callgrind_control -d``), before the kill."""
    out = root / "callgrind.out"

    def dump(pid: int) -> None:
        subprocess.run(
            ["callgrind_control", "-d", str(pid)],
            capture_output=True,
            check=True,
            timeout=tk.CALL_TIMEOUT,
        )
        deadline = time.monotonic() + tk.CALL_TIMEOUT
        while not re.search(r"^totals: ", _read(root / "callgrind.out.1"), re.M):
            if time.monotonic() > deadline:
                raise RuntimeError("callgrind wrote no dump")
            time.sleep(0.1)

    wrapper = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
    start(root, env, wrapper=wrapper, at_hello=dump)
    found = re.search(r"^totals: (\d+)", _read(root / "callgrind.out.1"), re.M)
    assert found is not None
    return int(found[1])


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _env(checkout: str | None) -> dict[str, str]:
    """The daemon's environment (``checkout``'s sources first on its path, if one is named),
    free to write bytecode caches: a start that compiles every module from source (under
    ``PYTHONDONTWRITEBYTECODE``, with editable installs) measures the compiler, not the daemon;
    an installed daemon has its caches written by pip."""
    env = dict(tk.checkout_env(checkout) or os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


FIELDS = (
    ("hello_ms", "to hello answered (ms)"),
    ("list_ms", "to list_combats answered (ms)"),
    ("command_ms", "to create_combat answered (ms)"),
    ("hello_cpu_ms", "CPU to hello (ms)"),
    ("command_cpu_ms", "CPU to create_combat (ms)"),
)
"""The figures of a start, as the table names them."""


def main() -> None:
    parser = argparse.ArgumentParser(description="a daemon's cold start to its first answers")
    parser.add_argument("--reps", type=int, default=15, help="measured starts of each checkout")
    parser.add_argument(
        "--compare", metavar="DIR", nargs="+", default=[], help="other checkouts, alternating"
    )
    parser.add_argument(
        "--importtime", action="store_true", help="also count each one's imports (one start)"
    )
    parser.add_argument(
        "--callgrind",
        type=int,
        default=0,
        metavar="N",
        help="also count each one's instructions to the hello's answer (N starts under valgrind)",
    )
    args = parser.parse_args()
    print(tk.machine())
    this = os.environ.get(tk.CHECKOUT_VARIABLE)
    checkouts = {this or "this checkout": this, **{c: c for c in args.compare}}
    names = list(checkouts)
    envs = {name: _env(checkout) for name, checkout in checkouts.items()}
    work = tk.workdir("startup")
    runs: dict[str, list[Start]] = {name: [] for name in names}
    for rep in range(-1, args.reps):  # -1: the unmeasured start that writes bytecode caches
        # Each repetition starts them in the other order: none always goes first after a pause.
        for name in names if rep % 2 else names[::-1]:
            root = work / f"{rep}-{names.index(name)}"
            figures = start(root, envs[name])
            if rep >= 0:
                runs[name].append(figures)
            shutil.rmtree(root)
    medians = {
        name: {f: tk.median([getattr(s, f) for s in starts]) for f, _ in FIELDS}
        for name, starts in runs.items()
    }
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nmedians of {args.reps} starts each, alternating; loadavg {load}\n")
    headers = ["figure", *names, *(f"÷ {name}" for name in names[1:])]
    rows = [
        [
            label,
            *(tk.fmt(medians[name][f], 1) for name in names),
            *(f"{medians[names[0]][f] / medians[name][f]:.2f}" for name in names[1:]),
        ]
        for f, label in FIELDS
    ]
    if args.callgrind:
        counts = {
            name: [
                instructions(work / f"callgrind-{i}-{n}", envs[name]) for n in range(args.callgrind)
            ]
            for i, name in enumerate(names)
        }
        medians_ir = {name: tk.median(c) for name, c in counts.items()}
        rows.append(
            [
                "instructions to hello (millions)",
                *(tk.fmt(medians_ir[n] / 1e6, 1) for n in names),
                *(f"{medians_ir[names[0]] / medians_ir[n]:.3f}" for n in names[1:]),
            ]
        )
    if args.importtime:
        counted = {name: imports(work / f"imports-{i}", envs[name]) for i, name in enumerate(names)}
        blank = [""] * (len(names) - 1)
        rows.append(["modules imported to hello", *(str(counted[n][0]) for n in names), *blank])
        rows.append(
            ["their own import times (ms)", *(tk.fmt(counted[n][1], 1) for n in names), *blank]
        )
    print(tk.table(headers, rows))
    print("\neach start, to hello answered (ms):")
    for name, starts in runs.items():
        print(f"  {name}: " + " ".join(f"{s.hello_ms:.0f}" for s in starts))


if __name__ == "__main__":
    main()
