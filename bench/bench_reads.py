"""Reads: ``get_combat`` on a small combat, queries/s, p50/p99 and the server's CPU per call at 1
and 50 connections, against two echo baselines at the same connection counts, all measured in
each repetition: the bare ``asyncio.Protocol`` echo (``asyncio_echo.py``, issue 11's baseline) and
the anyio echo (``echo_server.py``, the earlier one).

    python bench/bench_reads.py --seconds 5 --reps 3

Target (issue 11): the daemon's read throughput is at least 70% of the asyncio echo's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

COMBAT = "reads"
COMBATANTS = 2
"""A small combat: two combatants, started (a turn, an order, no conditions)."""
TARGET_RATIO = 0.7


async def _setup(sock: Path) -> int:
    conn = await tk.Conn.open(sock)
    await conn.call("create_combat", {"request_id": "r0", "combat_id": COMBAT, "ruleset": "marvel"})
    for i in range(COMBATANTS):
        await conn.call(
            "add_combatant",
            {"request_id": f"a{i}", "combat": COMBAT, "id": f"k{i}", "display_name": f"K{i}"},
        )
    await conn.call("start_combat", {"request_id": "start", "combat": COMBAT})
    view = await conn.call("get_combat", {"combat": COMBAT})
    await conn.aclose()
    return len(tk.wire.pack(tk.wire.Response(1, None, view)))


def _worker(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_work, spec, ready)


async def _work(spec: dict[str, Any], ready: Any) -> Any:
    conns = await tk.open_many(Path(spec["socket"]), spec["conns"])
    params = {"combat": COMBAT}

    async def call(conn: tk.Conn, _n: int) -> None:
        await conn.ask("get_combat", params)

    await anyio.to_thread.run_sync(ready)
    result = await tk.closed_loop(conns, call, spec["warmup"], spec["seconds"])
    for c in conns:
        await c.aclose()
    return result


SERVERS = ("asyncio-echo", "anyio-echo", "daemon")
"""The daemon and both baselines, measured in this order in every repetition."""


def main() -> None:
    parser = argparse.ArgumentParser(description="get_combat throughput and latency vs echo")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per point")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--procs", type=int, default=1, help="client processes at 50 connections")
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 50])
    args = parser.parse_args()
    print(tk.machine())
    points: dict[tuple[str, int], list[tk.LoopFigures]] = {}
    reply_bytes = 0
    for rep in range(args.reps):
        root = tk.workdir(f"reads-{rep}")
        servers = {
            "asyncio-echo": tk.asyncio_echo(root).start(),
            "anyio-echo": tk.echo(root).start(),
            "daemon": tk.daemon(root).start(),
        }
        try:
            reply_bytes = anyio.run(_setup, servers["daemon"].socket_path)
            for conns in args.connections:
                for name in SERVERS:
                    server = servers[name]
                    procs = 1 if conns == 1 else args.procs
                    specs = [
                        {
                            "socket": str(server.socket_path),
                            "conns": n,
                            "warmup": args.warmup,
                            "seconds": args.seconds,
                        }
                        for n in tk.split(conns, procs)
                    ]
                    figures = tk.measure_loop(server, _worker, specs, args.warmup, args.seconds)
                    points.setdefault((name, conns), []).append(figures)
                    print(
                        f"rep {rep} {name:12} conns={conns:3} {figures.calls_per_s:9.0f}/s "
                        f"p50={figures.p50_ms:.3f} ms p99={figures.p99_ms:.3f} ms "
                        f"server_cpu={figures.server_cpu:.2f} "
                        f"({figures.cpu_us_per_call:.0f} µs/call) "
                        f"client_cpu={figures.client_cpu:.2f}",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()
    print(f"\nget_combat reply: {reply_bytes} bytes; medians of {args.reps} repetitions\n")
    rows = []
    for conns in args.connections:
        rate = {n: tk.median([f.calls_per_s for f in points[(n, conns)]]) for n in SERVERS}
        ratio = rate["daemon"] / rate["asyncio-echo"]
        for name in SERVERS:
            figs = points[(name, conns)]
            rows.append(
                [
                    conns,
                    name,
                    tk.fmt(rate[name]),
                    tk.fmt(tk.median([f.p50_ms for f in figs]), 3),
                    tk.fmt(tk.median([f.p99_ms for f in figs]), 3),
                    f"{tk.median([f.server_cpu for f in figs]):.2f}",
                    tk.fmt(tk.median([f.cpu_us_per_call for f in figs]), 1),
                    f"{tk.median([f.client_cpu for f in figs]):.2f}",
                    f"{rate[name] / rate['asyncio-echo']:.0%}",
                    ("yes" if ratio >= TARGET_RATIO else "no") if name == "daemon" else "",
                ]
            )
    headers = [
        "conns",
        "server",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "server cpu",
        "server µs/call",
        "client cpu",
        "of asyncio echo",
        f"≥{TARGET_RATIO:.0%}?",
    ]
    print(tk.table(headers, rows))


if __name__ == "__main__":
    main()
