"""Reads: ``get_combat`` on a small combat, queries/s and p50/p99 at 1 and 50 connections, against
the echo baseline at the same connection counts, both measured in each repetition.

    python bench/bench_reads.py --seconds 5 --reps 3

Target: the daemon's read throughput is at least 50% of the echo baseline's.
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
TARGET_RATIO = 0.5


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
        await conn.call("get_combat", params)

    await anyio.to_thread.run_sync(ready)
    result = await tk.closed_loop(conns, call, spec["warmup"], spec["seconds"])
    for c in conns:
        await c.aclose()
    return result


def _pair(daemon: list[float], baseline: list[float]) -> str:
    return f"{tk.median(daemon):.2f}/{tk.median(baseline):.2f}"


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
        servers = {"echo": tk.echo(root).start(), "daemon": tk.daemon(root).start()}
        try:
            reply_bytes = anyio.run(_setup, servers["daemon"].socket_path)
            for conns in args.connections:
                for name, server in servers.items():
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
                        f"rep {rep} {name:6} conns={conns:3} {figures.calls_per_s:9.0f}/s "
                        f"p50={figures.p50_ms:.3f} ms p99={figures.p99_ms:.3f} ms "
                        f"server_cpu={figures.server_cpu:.2f} client_cpu={figures.client_cpu:.2f}",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()
    print(f"\nget_combat reply: {reply_bytes} bytes; medians of {args.reps} repetitions\n")
    rows = []
    for conns in args.connections:
        d = points[("daemon", conns)]
        e = points[("echo", conns)]
        d_rate = tk.median([f.calls_per_s for f in d])
        e_rate = tk.median([f.calls_per_s for f in e])
        ratio = d_rate / e_rate
        rows.append(
            [
                conns,
                tk.fmt(d_rate),
                tk.fmt(tk.median([f.p50_ms for f in d]), 3),
                tk.fmt(tk.median([f.p99_ms for f in d]), 3),
                tk.fmt(e_rate),
                tk.fmt(tk.median([f.p50_ms for f in e]), 3),
                tk.fmt(tk.median([f.p99_ms for f in e]), 3),
                f"{ratio:.0%}",
                "yes" if ratio >= TARGET_RATIO else "no",
                _pair([f.server_cpu for f in d], [f.server_cpu for f in e]),
                _pair([f.client_cpu for f in d], [f.client_cpu for f in e]),
            ]
        )
    headers = [
        "conns",
        "daemon q/s",
        "p50 ms",
        "p99 ms",
        "echo q/s",
        "echo p50",
        "echo p99",
        "ratio",
        "≥50%?",
        "server cpu d/e",
        "client cpu d/e",
    ]
    print(tk.table(headers, rows))


if __name__ == "__main__":
    main()
