"""Instructions per durable command, counted by valgrind's callgrind: a figure that does not
depend on the machine or its load, unlike CPU time, which moved fourfold between the CPUs this
project's sessions ran on. Before and after a change on the command path, compare these.

The daemon runs under ``valgrind --tool=callgrind --separate-threads=yes`` with counting off.
``--connections`` connections each create a combat with one combatant and send ``--warmup``
commands of ``bench_commands.py``'s workload (``apply_condition`` and ``remove_condition``
alternating) uncounted: 250 by default, so that each combat's undo history is at its reach
(200 commands), as a combat's is after ``bench_commands.py``'s first seconds (a young combat
costs less). Counting is then switched on (``callgrind_control -i on``) for ``--commands`` more
per connection, all connections at once, closed loop, and off again: 25 by default, one undo
stretch (``turnkeeper_engine.evolve.STRETCH``), so that each combat packs its history once in
the window, as it does every 25 commands. A combat's first snapshot comes after 500 to 1000
events (2 a command here), so the window holds those of the combats whose first falls in it:
about one in ten, twice the rate of a long run (a checkout whose first snapshot comes at 1000
events, such as ``7bcdbb2``, has none in it).

Reported per command: the event loop's thread (the process's first) and every other thread
(the committer, the checkpointer, the hook and rebuild workers), each from its ``totals:``
line. ``--ws`` measures the same over WebSocket. This checkout's daemon is measured, or the
one ``TURNKEEPER_BENCH_CHECKOUT`` names, then each checkout of ``--compare`` the same way, in
turn; ``--keep DIR`` keeps callgrind's files for ``callgrind_annotate``. The hash seed is
fixed, so a repetition runs the same instructions within about a thousand per command on
the event loop's thread (the other threads move more: a group commit's size depends on
timing).

    python bench/bench_instructions.py --reps 1 --compare /tmp/tk-before

A repetition takes about half a minute: only the counted commands run instrumented.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import tkbench as tk

THREAD_FILE = re.compile(r"callgrind\.out\.\d+-(\d+)$")
STOP_TIMEOUT = 120.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=250, help="uncounted commands per connection")
    parser.add_argument("--commands", type=int, default=25, help="counted commands per connection")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--ws", action="store_true", help="over WebSocket, not the Unix socket")
    parser.add_argument("--compare", nargs="*", default=[], metavar="DIR", help="other checkouts")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="copy callgrind's files here (callgrind_annotate)"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    checkouts: list[str | None] = [os.environ.get(tk.CHECKOUT_VARIABLE) or None, *args.compare]
    rows = []
    for rep in range(args.reps):
        for i, checkout in enumerate(checkouts):
            loop, others = measure(args, checkout, tk.workdir(f"instructions-{rep}-{i}"))
            name = checkout or "this checkout"
            rows.append([name, rep + 1, f"{loop:,.0f}", f"{others:,.0f}", f"{loop + others:,.0f}"])
            print(rows[-1], flush=True)
    transport = "WebSocket" if args.ws else "Unix socket"
    print(
        f"\n{tk.machine()}; {args.connections} connections over the {transport}, "
        f"{args.commands} counted commands each"
    )
    print(
        tk.table(
            ["daemon", "rep", "event loop / command", "other threads / command", "total"], rows
        )
    )


def measure(args: argparse.Namespace, checkout: str | None, root: Path) -> tuple[float, float]:
    """Instructions per counted command: the event loop's thread, and the other threads'."""
    out = root / "callgrind"
    out.mkdir()
    env = dict(tk.checkout_env(checkout) or os.environ, PYTHONHASHSEED="0")
    # Without bytecode caches every start compiles the project again, under callgrind.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    sources = [
        str(Path(checkout or tk.REPO) / part / "src") for part in ("daemon", "sdk", "engine")
    ]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *sources], env=env, check=True)
    data = root / "data"
    token = tk.narrator_token(data, env) if args.ws else ""
    port = tk.free_port()
    extra = ["--ws", f"127.0.0.1:{port}"] if args.ws else []
    server = tk.daemon(root, *extra, data_dir=data)
    server.argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}/callgrind.out.%p",
        *server.argv,
    ]
    server.env = env
    server.start()
    try:
        anyio.run(_drive, args, server, (port, token) if args.ws else None)
    finally:
        _stop(server)
    counted = args.connections * args.commands
    totals = {}
    for path in out.iterdir():
        found = THREAD_FILE.search(path.name)
        total = re.search(r"^totals: (\d+)", path.read_text(errors="replace"), re.M)
        if found and total:
            totals[int(found[1])] = int(total[1])
    if args.keep:
        shutil.copytree(out, args.keep / root.name, dirs_exist_ok=True)
    if 1 not in totals:
        raise RuntimeError(f"callgrind wrote no counts of the event loop's thread in {out}")
    loop = totals.pop(1)
    return loop / counted, sum(totals.values()) / counted


def _stop(server: tk.Server) -> None:
    """SIGTERM, waited for longer than ``Server.stop`` waits: callgrind writes its counts as
    the daemon exits, slowly under valgrind, and a daemon killed writes none."""
    assert server.process is not None
    server.process.terminate()
    try:
        server.process.wait(timeout=STOP_TIMEOUT)
    finally:
        server.kill()


async def _drive(args: argparse.Namespace, server: tk.Server, ws: tuple[int, str] | None) -> None:
    conns = await tk.open_many(server.socket_path, args.connections, ws=ws)
    combats = {id(c): f"i{n}" for n, c in enumerate(conns)}
    async with anyio.create_task_group() as tg:
        for conn in conns:
            tg.start_soon(tk.condition_combat, conn, combats[id(conn)])
    call = tk.condition_calls(combats)

    async def run(conn: tk.Conn, first: int, count: int) -> None:
        for n in range(first, first + count):
            await call(conn, n)

    async def everyone(first: int, count: int) -> None:
        async with anyio.create_task_group() as tg:
            for conn in conns:
                tg.start_soon(run, conn, first, count)

    await everyone(0, args.warmup)
    await _control(server.pid, "on")
    await everyone(args.warmup, args.commands)
    await _control(server.pid, "off")
    for conn in conns:
        await conn.aclose()


async def _control(pid: int, switch: str) -> None:
    await anyio.run_process(["callgrind_control", "-i", switch, str(pid)])


if __name__ == "__main__":
    main()
