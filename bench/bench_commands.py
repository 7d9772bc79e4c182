"""Durable commands: commands/s and p99 at 50 connections, each connection on its own combat,
alternating ``apply_condition`` and ``remove_condition`` (each a durable command of two events,
with a unique request_id), against the ``asyncio.Protocol`` echo baseline at 50 connections in
the same repetition; with the daemon's CPU time per command.

    python bench/bench_commands.py --seconds 5 --reps 3
    python bench/bench_commands.py --store sqlite postgresql   # each store, in the same run

With ``--store postgresql`` the daemon keeps its combats in a fresh database on the server at
``--pg-server`` (dropped after each repetition), and the CPU of that database's sessions is
shown beside the daemon's (the server must run on this machine).

Targets (issue 11): at least 6,000 commands/s, at most 120 µs of daemon CPU per command. The p99
of this closed loop is shown; the p99 target is measured at a fixed offered load, in
``bench_latency.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

STORES = ("sqlite", "postgresql")
DAEMON_NAMES = {"sqlite": "daemon", "postgresql": "daemon on postgresql"}
"""How each store's daemon is named in the output (``daemon`` alone is SQLite's, as before)."""

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
            await tk.condition_combat(conn, combats[id(conn)])

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
    parser.add_argument(
        "--store",
        nargs="+",
        choices=STORES,
        default=["sqlite"],
        help="the daemon's stores to measure, each beside the echo baseline (default: sqlite)",
    )
    parser.add_argument(
        "--pg-server",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a local PostgreSQL server's maintenance database, for --store postgresql",
    )
    args = parser.parse_args()
    print(tk.machine())
    daemons = [DAEMON_NAMES[store] for store in args.store]
    runs: dict[str, list[tk.LoopFigures]] = {name: [] for name in (*daemons, "echo")}
    for rep in range(args.reps):
        root = tk.workdir(f"commands-{rep}")
        servers: dict[str, tk.Server] = {"echo": tk.asyncio_echo(root).start()}
        databases: dict[str, tk.PostgresDatabase] = {}
        try:
            for store in args.store:
                name = DAEMON_NAMES[store]
                if store == "postgresql":
                    databases[name] = database = tk.PostgresDatabase(args.pg_server)
                    extra = ["--store", database.dsn]
                else:
                    extra = []
                # Each daemon its own directory: the SQLite one's is its store.
                servers[name] = tk.daemon(root / store, *extra).start()
            for name, server in servers.items():
                specs = [
                    {
                        "socket": str(server.socket_path),
                        "conns": n,
                        "tag": f"w{i}",
                        "daemon": name != "echo",
                        "warmup": args.warmup,
                        "seconds": args.seconds,
                    }
                    for i, n in enumerate(tk.split(args.connections, args.procs))
                ]
                database = databases.get(name)
                figures = tk.measure_loop(
                    server,
                    _worker,
                    specs,
                    args.warmup,
                    args.seconds,
                    store_cpu=database.cpu_seconds if database else None,
                )
                runs[name].append(figures)
                print(
                    f"rep {rep} {name:18} {figures.calls_per_s:8.0f}/s"
                    f" p50={figures.p50_ms:.2f} ms p99={figures.p99_ms:.2f} ms"
                    f" server_cpu={figures.server_cpu:.2f} ({figures.cpu_us_per_call:.0f} µs/call)"
                    + (
                        f" store_cpu={figures.store_cpu:.2f}"
                        f" ({figures.store_cpu_us_per_call:.0f} µs/call)"
                        if database
                        else ""
                    )
                    + f" client_cpu={figures.client_cpu:.2f}",
                    flush=True,
                )
        finally:
            for server in servers.values():
                server.stop()
            for database in databases.values():
                database.drop()
    e = runs["echo"]
    echo_rate = tk.median([f.calls_per_s for f in e])
    echo_cpu = tk.median([f.cpu_us_per_call for f in e])
    print(f"\n{args.connections} connections; medians of {args.reps} repetitions")
    for name in daemons:
        _report(name, runs[name], e, echo_rate, echo_cpu)


def _report(
    name: str, d: list[tk.LoopFigures], e: list[tk.LoopFigures], echo_rate: float, echo_cpu: float
) -> None:
    rate = tk.median([f.calls_per_s for f in d])
    cpu_us = tk.median([f.cpu_us_per_call for f in d])
    store_us = tk.median([f.store_cpu_us_per_call for f in d])
    print(f"\n{name}\n")
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
                    tk.fmt(echo_cpu, 1),
                    f"{cpu_us / echo_cpu:.1f}x",
                    f"≤ {TARGET_CPU_US:g}",
                    "yes" if cpu_us <= TARGET_CPU_US else f"no ({cpu_us / TARGET_CPU_US:.1f}x)",
                ],
                *(
                    [["PostgreSQL sessions' CPU µs per call", tk.fmt(store_us, 1), "", "", "", ""]]
                    if store_us
                    else []
                ),
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
