"""Durable commands: commands/s and p99 at 50 connections, each connection on its own combat,
alternating ``apply_condition`` and ``remove_condition`` (each a durable command of two events,
with a unique request_id), against the ``asyncio.Protocol`` echo baseline at 50 connections in
the same repetition; with the daemon's CPU time per command.

    python bench/bench_commands.py --seconds 5 --reps 3

Targets (issue 11): at least 6,000 commands/s, at most 120 µs of daemon CPU per command. The p99
of this closed loop is shown; the p99 target is measured at a fixed offered load, in
``bench_latency.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

TARGET_RATE = 6000.0
TARGET_CPU_US = 120.0


def _worker(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_work, spec, ready)


async def _work(spec: dict[str, Any], ready: Any) -> Any:
    ws = tuple(spec["ws"]) if spec.get("ws") else None
    conns = await tk.open_many(Path(spec["socket"]), spec["conns"], ws=ws)  # type: ignore[arg-type]
    tag = spec["tag"]
    combats = {id(c): f"{tag}-{i}" for i, c in enumerate(conns)}
    if spec["daemon"]:
        for conn in conns:
            combat = combats[id(conn)]
            await conn.call(
                "create_combat",
                {"request_id": f"{combat}-c", "combat_id": combat, "ruleset": "marvel"},
            )
            await conn.call(
                "add_combatant",
                {"request_id": f"{combat}-a", "combat": combat, "id": "k", "display_name": "K"},
            )

    async def echo_call(conn: tk.Conn, n: int) -> None:
        combat = combats[id(conn)]
        await conn.call(
            "apply_condition",
            {"combat": combat, "request_id": f"{combat}-{n}", "target": "k", "type": "custom"},
        )

    await anyio.to_thread.run_sync(ready)
    call = tk.condition_calls(combats) if spec["daemon"] else echo_call
    result = await tk.closed_loop(conns, call, spec["warmup"], spec["seconds"])
    for c in conns:
        await c.aclose()
    return result


def main() -> None:
    parser = tk.command_load_parser("durable commands/s and p99 at 50 connections")
    parser.add_argument("--procs", type=int, default=1, help="client processes")
    args = parser.parse_args()
    print(tk.machine())
    runs: dict[str, list[tk.LoopFigures]] = {"daemon": [], "echo": []}
    for rep in range(args.reps):
        root = tk.workdir(f"commands-{rep}")
        servers = {"echo": tk.asyncio_echo(root).start(), "daemon": tk.daemon(root).start()}
        try:
            for name, server in servers.items():
                specs = [
                    {
                        "socket": str(server.socket_path),
                        "conns": n,
                        "tag": f"w{i}",
                        "daemon": name == "daemon",
                        "warmup": args.warmup,
                        "seconds": args.seconds,
                    }
                    for i, n in enumerate(tk.split(args.connections, args.procs))
                ]
                figures = tk.measure_loop(server, _worker, specs, args.warmup, args.seconds)
                runs[name].append(figures)
                print(
                    f"rep {rep} {name:6} {figures.calls_per_s:8.0f}/s p50={figures.p50_ms:.2f} ms "
                    f"p99={figures.p99_ms:.2f} ms server_cpu={figures.server_cpu:.2f} "
                    f"({figures.cpu_us_per_call:.0f} µs/call) "
                    f"client_cpu={figures.client_cpu:.2f}",
                    flush=True,
                )
        finally:
            for server in servers.values():
                server.stop()
    d, e = runs["daemon"], runs["echo"]
    rate = tk.median([f.calls_per_s for f in d])
    cpu_us = tk.median([f.cpu_us_per_call for f in d])
    echo_rate = tk.median([f.calls_per_s for f in e])
    print(f"\n{args.connections} connections; medians of {args.reps} repetitions\n")
    print(
        tk.table(
            ["figure", "daemon", "asyncio echo", "ratio", "target", "met?"],
            [
                [
                    "commands/s",
                    tk.fmt(rate),
                    tk.fmt(echo_rate),
                    f"{rate / echo_rate:.0%}",
                    f"≥ {TARGET_RATE:,.0f}",
                    "yes" if rate >= TARGET_RATE else f"no ({rate / TARGET_RATE:.0%} of it)",
                ],
                [
                    "p50 ms",
                    tk.fmt(tk.median([f.p50_ms for f in d])),
                    tk.fmt(tk.median([f.p50_ms for f in e])),
                    "",
                    "",
                    "",
                ],
                [
                    "p99 ms",
                    tk.fmt(tk.median([f.p99_ms for f in d])),
                    tk.fmt(tk.median([f.p99_ms for f in e])),
                    "",
                    "",
                    "",
                ],
                [
                    "server CPU µs per call",
                    tk.fmt(cpu_us, 1),
                    tk.fmt(tk.median([f.cpu_us_per_call for f in e]), 1),
                    f"{cpu_us / tk.median([f.cpu_us_per_call for f in e]):.1f}x",
                    f"≤ {TARGET_CPU_US:g}",
                    "yes" if cpu_us <= TARGET_CPU_US else f"no ({cpu_us / TARGET_CPU_US:.1f}x)",
                ],
                [
                    "server CPU (cores)",
                    f"{tk.median([f.server_cpu for f in d]):.2f}",
                    f"{tk.median([f.server_cpu for f in e]):.2f}",
                    "",
                    "",
                    "",
                ],
                [
                    "client CPU (cores)",
                    f"{tk.median([f.client_cpu for f in d]):.2f}",
                    f"{tk.median([f.client_cpu for f in e]):.2f}",
                    "",
                    "",
                    "",
                ],
            ],
        )
    )


if __name__ == "__main__":
    main()
