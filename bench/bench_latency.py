"""Durable commands at a fixed offered load (open loop): 2,000 commands/s over 50 connections,
each connection on its own combat alternating ``apply_condition`` and ``remove_condition``, each
command sent at its scheduled time whatever the answers so far, its latency taken from that
scheduled time (a server that falls behind pays for every request it delays, not only the
first). Measured in each repetition against:

- the ``asyncio.Protocol`` echo (``asyncio_echo.py``) under the same schedule: the floor of the
  client and the machine;
- the durable echo (``durable_echo.py``): the same, answering once the requests are committed
  to SQLite (WAL, ``synchronous=FULL``) by a group-committing thread: the floor of the disk,
  which the daemon's p99 is read against;
- the daemon as started by default, for the p99 target;
- the daemon with ``--snapshot-every 100`` and without snapshots (``--snapshot-every`` far beyond
  what a run writes), for the snapshot target.

    python bench/bench_latency.py --seconds 5 --reps 3
    python bench/bench_latency.py --seconds 5 --reps 3 --committer  # and the committer's timings

With ``--committer`` the daemons run under ``committer_traced_serve.py``, and each run also
prints what the committer recorded in the window (transactions, batches per transaction, the
time of each and of its ``COMMIT``, snapshot encodings, event moves, request indexings, prunes,
checkpoints) and each thread's CPU.

Targets (issue 11): p99 at most 10 ms at 2,000 commands/s over 50 connections; with
``--snapshot-every 100``, p99 within 10% of that without snapshots.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import committer_traced_serve as traced
import tkbench as tk

TARGET_P99_MS = 10.0
TARGET_SNAPSHOT_RATIO = 1.10
NO_SNAPSHOTS = "1000000000"
"""``--snapshot-every`` for "without snapshots": no combat of a run gets near this many events."""
KEPT_UP = 0.95
"""A server that answers less than this share of the offered load in the window has fallen
behind: its latency then grows with the window, and comparing two such p99s means nothing."""
SERVERS: dict[str, tuple[str, ...] | None] = {
    # name: daemon options, or None for an echo baseline (``ECHOES``)
    "asyncio-echo": None,
    "durable-echo": None,
    "daemon": (),
    "no snapshots": ("--snapshot-every", NO_SNAPSHOTS),
    "snapshot-every 100": ("--snapshot-every", "100"),
}


def _durable_echo(root: Path) -> tk.Server:
    """The floor of a durable command on this disk (``durable_echo.py``)."""
    sock = root / "run" / "durable-echo.sock"
    argv = [
        sys.executable,
        str(tk.BENCH / "durable_echo.py"),
        "--socket",
        str(sock),
        "--data-dir",
        str(root / "data"),
    ]
    return tk.Server(argv, sock, root / "durable-echo.log")


ECHOES = {"asyncio-echo": tk.asyncio_echo, "durable-echo": _durable_echo}


def _worker(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_work, spec, ready)


async def _work(spec: dict[str, Any], ready: Any) -> Any:
    conns = [tk.PipeConn(c) for c in await tk.open_many(Path(spec["socket"]), spec["conns"])]
    tag = spec["tag"]
    combats = {id(c): f"{tag}-{i}" for i, c in enumerate(conns)}
    # The condition each apply_condition made, by connection and request number: the
    # remove_condition after it needs its id, so it waits for that answer (if late, the wait
    # counts in its latency: it is measured from its own scheduled time).
    applied: dict[tuple[int, int], tuple[anyio.Event, list[str]]] = {}
    if spec["daemon"]:
        for conn in conns:
            await tk.condition_combat(conn.conn, combats[id(conn)])

    def condition_slot(conn: tk.PipeConn, n: int) -> tuple[anyio.Event, list[str]]:
        return applied.setdefault((id(conn), n), (anyio.Event(), []))

    async def daemon_call(conn: tk.PipeConn, n: int) -> float:
        combat = combats[id(conn)]
        params: dict[str, Any] = {"combat": combat, "request_id": f"{combat}-{n}"}
        if n % 2 == 0:
            params |= {"target": "k", "type": "custom"}
            at, result = await conn.call("apply_condition", params)
            made = next(e for e in result["events"] if e["event"] == "condition_applied")
            event, slot = condition_slot(conn, n)
            slot.append(made["condition"]["id"])
            event.set()
            return at
        event, slot = condition_slot(conn, n - 1)
        with anyio.fail_after(tk.CALL_TIMEOUT):
            await event.wait()
        del applied[(id(conn), n - 1)]
        at, _ = await conn.call("remove_condition", params | {"condition": slot[0]})
        return at

    async def echo_call(conn: tk.PipeConn, n: int) -> float:
        combat = combats[id(conn)]
        params = {"combat": combat, "request_id": f"{combat}-{n}", "target": "k", "type": "custom"}
        at, _ = await conn.call("apply_condition", params)
        return at

    await anyio.to_thread.run_sync(ready)
    call = daemon_call if spec["daemon"] else echo_call
    return await tk.open_loop(conns, call, spec["rate"], spec["warmup"], spec["seconds"])


def _traced(server: tk.Server, out: Path | None) -> dict[str, Any] | None:
    """What ``committer_traced_serve.py`` recorded since the last call (None without it)."""
    if out is None:
        return None
    out.unlink(missing_ok=True)
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            figures: dict[str, Any] = json.loads(out.read_text())
            return figures
        except (FileNotFoundError, json.JSONDecodeError):
            time.sleep(0.01)
    raise RuntimeError(f"{out} not written")


def _measure(
    server: tk.Server, spec: dict[str, Any], out: Path | None
) -> tuple[dict[str, float], dict[str, Any] | None]:
    workers = tk.Workers.spawn(_worker, [spec])
    try:
        workers.wait_ready()
        workers.start()
        time.sleep(0.1 + spec["warmup"])  # open_loop starts 0.1 s after go
        before = _traced(server, out)
        cpu_before = server.cpu_seconds()
        time.sleep(spec["seconds"])
        server_cpu = server.cpu_seconds() - cpu_before
        after = _traced(server, out)
        [run] = workers.results()
    finally:
        workers.terminate()
    inside = None
    if before is not None and after is not None:
        inside = after | {
            "threads": {
                name: cpu - before["threads"].get(name, 0.0)
                for name, cpu in after["threads"].items()
            }
        }
    latencies, in_window = run.latencies_ms, run.answered_in_window
    return {
        "served": in_window / spec["seconds"],
        "unanswered": run.unanswered,
        "p50": tk.percentile(latencies, 50),
        "p99": tk.percentile(latencies, 99),
        "max": max(latencies, default=float("nan")),
        "offered": run.scheduled / spec["seconds"],
        "server_cpu": server_cpu / spec["seconds"],
        "cpu_us": server_cpu / in_window * 1e6 if in_window else float("nan"),
        "client_cpu": run.client_cpu_s / spec["seconds"],
    }, inside


def _inside(inside: dict[str, Any], seconds: float) -> str:
    """A line of what the committer recorded in the window (``--committer``)."""
    commits = inside["commits"]

    def spread(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{tk.percentile(values, 50):.2f}/{tk.percentile(values, 99):.2f}/{max(values):.2f}"

    def column(i: int) -> list[float]:
        return [row[i] for row in commits]

    def times(i: int) -> str:
        taken = [v for v in column(i) if v > 0]
        return f"{len(taken)} ({max(taken, default=0):.1f} ms max)"

    threads = ", ".join(
        f"{name.split('/')[0]} {cpu / seconds:.2f}"
        for name, cpu in sorted(inside["threads"].items(), key=lambda kv: -kv[1])
        if cpu > 0
    )
    return (
        f"    committer: {len(commits) / seconds:.0f} transactions/s, batches each "
        f"p50/max {tk.percentile(column(0), 50):.0f}/{max(column(0), default=0):.0f}; "
        f"transaction ms p50/p99/max {spread(column(1))}, its COMMIT {spread(column(2))}; "
        f"snapshots encoded in {times(3)}, moves {times(4)}, indexings {times(5)}; "
        f"prunes {len(inside['prunes_ms'])} ({max(inside['prunes_ms'], default=0):.1f} ms max), "
        f"checkpoints by the committer {len(inside['checkpoints_ms'])} "
        f"({max(inside['checkpoints_ms'], default=0):.1f} ms max), "
        f"transactions aside {len(inside.get('asides_ms', []))} "
        f"({max(inside.get('asides_ms', []), default=0):.1f} ms max)\n"
        f"    CPU by thread (cores): {threads}"
    )


def main() -> None:
    parser = tk.command_load_parser("durable commands' latency at a fixed offered load")
    parser.add_argument("--rate", type=float, default=2000.0, help="offered commands/s in all")
    parser.add_argument(
        "--snapshot-rate",
        type=float,
        help="offered commands/s for the two snapshot servers (default: --rate)",
    )
    parser.add_argument(
        "--committer",
        action="store_true",
        help="run the daemons under committer_traced_serve.py and print, per run, the"
        " committer's timings and each thread's CPU in the window",
    )
    args = parser.parse_args()
    print(tk.machine())
    snapshot_rate = args.snapshot_rate or args.rate
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SERVERS}
    for rep in range(args.reps):
        for name, options in SERVERS.items():
            root = tk.workdir(f"latency-{rep}-{name.replace(' ', '-')}")
            out = root / "committer.json" if args.committer and options is not None else None
            if options is None:
                made = ECHOES[name](root)
            elif out is not None:
                os.environ[traced.OUT_VARIABLE] = str(out)
                made = tk.daemon(root, *options, entry=(traced.__file__,))
            else:
                made = tk.daemon(root, *options)
            server = made.start()
            try:
                spec = {
                    "socket": str(server.socket_path),
                    "conns": args.connections,
                    "tag": f"r{rep}",
                    "daemon": options is not None,
                    "rate": args.rate if options in (None, ()) else snapshot_rate,
                    "warmup": args.warmup,
                    "seconds": args.seconds,
                }
                figures, inside = _measure(server, spec, out)
            finally:
                server.stop()
            runs[name].append(figures)
            print(
                f"rep {rep} {name:18} offered {figures['offered']:.0f}/s, answered "
                f"{figures['served']:.0f}/s in the window, {figures['unanswered']:.0f} never; "
                f"p50={figures['p50']:.2f} ms "
                f"p99={figures['p99']:.2f} ms max={figures['max']:.2f} ms "
                f"server_cpu={figures['server_cpu']:.2f} ({figures['cpu_us']:.0f} µs/command) "
                f"client_cpu={figures['client_cpu']:.2f}",
                flush=True,
            )
            if inside is not None:
                print(_inside(inside, args.seconds), flush=True)

    def med(name: str, key: str) -> float:
        return tk.median([r[key] for r in runs[name]])

    print(
        f"\n{args.rate:,.0f} commands/s offered over {args.connections} connections "
        f"({snapshot_rate:,.0f} /s to the two snapshot servers), latency from the scheduled "
        f"send (a request unanswered {tk.OPEN_LOOP_DRAIN:g} s after the window counts with its "
        f"wait so far); medians of {args.reps} repetitions\n"
    )
    base = med("no snapshots", "p99")
    rows = []
    for name in SERVERS:
        p99 = med(name, "p99")
        target, met = "", ""
        if name == "daemon":
            target = f"p99 ≤ {TARGET_P99_MS:g} ms"
            met = "yes" if p99 <= TARGET_P99_MS else f"no ({p99 / TARGET_P99_MS:.1f}x)"
        elif name == "snapshot-every 100":
            target = f"p99 ≤ {TARGET_SNAPSHOT_RATIO:.2f}x no snapshots"
            met = "yes" if p99 <= base * TARGET_SNAPSHOT_RATIO else "no"
            if med("no snapshots", "served") < KEPT_UP * med("no snapshots", "offered"):
                met = "not comparable: the daemon fell behind the offered load"
        rows.append(
            [
                name,
                tk.fmt(med(name, "offered")),
                tk.fmt(med(name, "served")),
                tk.fmt(med(name, "p50")),
                tk.fmt(p99),
                tk.fmt(med(name, "max")),
                f"{p99 / med('asyncio-echo', 'p99'):.1f}x",
                f"{p99 / med('durable-echo', 'p99'):.1f}x",
                f"{p99 / base:.2f}x",
                f"{med(name, 'server_cpu'):.2f}",
                tk.fmt(med(name, "cpu_us"), 1),
                target,
                met,
            ]
        )
    headers = [
        "server",
        "offered/s",
        "answered/s in window",
        "p50 ms",
        "p99 ms",
        "max ms",
        "p99 / echo",
        "p99 / durable echo",
        "p99 / no snapshots",
        "server cpu",
        "server µs/command",
        "target",
        "met?",
    ]
    print(tk.table(headers, rows))


if __name__ == "__main__":
    main()
