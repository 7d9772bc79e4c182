"""Scale: what many resident combats cost every command. One daemon; combats are created through
the protocol (``create_combat``, many connections at once) up to each level in ``--combats``, and
at each level the commands workload of ``bench_commands.py`` (50 connections, each on its own
combat, alternating ``apply_condition`` and ``remove_condition``) is measured ``--reps`` times.
The workload's combats are made once, before the first level, and count among the resident
ones: every level holds exactly as many combats as it says (100,000 is ``MAX_COMBATS``, which
leaves no room for the workload to create its own).
The first level is the baseline. Then the daemon is stopped and started again on the same data
directory: the time until its socket accepts and until ``list_combats`` answers (against a start
on an empty directory in the same run), its resident size, and the same workload once more.

    python bench/bench_scale.py --combats 100 50000 100000 --reps 3

Targets (issue 11): command p50 with 50,000 resident combats at most 1.2x that with 100; 100,000
combats start and serve.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

TARGET_P50_RATIO = 1.2
TARGET_COMBATS = 50_000
CREATORS = 2
"""Client processes creating combats."""
CREATOR_CONNECTIONS = 50
WORKLOAD_COMBAT = "w{:03d}"
"""The workload's combats (ids sort before the others' ``s…``)."""
CREATE_CHUNK = 2000
"""Combats created by one set of creator processes: on a daemon whose commits slow as combats
grow, a chunk stays well inside ``tkbench.WORKER_TIMEOUT``, and the progress shows."""


def _creator(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_create, spec, ready)


async def _create(spec: dict[str, Any], ready: Any) -> int:
    conns = await tk.open_many(Path(spec["socket"]), spec["conns"])
    await anyio.to_thread.run_sync(ready)
    names: list[str] = spec["combats"]
    done = 0

    async def one(conn: tk.Conn, mine: list[str]) -> None:
        nonlocal done
        for combat in mine:
            await conn.call(
                "create_combat",
                {"request_id": f"{combat}-c", "combat_id": combat, "ruleset": "marvel"},
            )
            done += 1

    async with anyio.create_task_group() as tg:
        for n, conn in enumerate(conns):
            tg.start_soon(one, conn, names[n :: len(conns)])
    for conn in conns:
        await conn.aclose()
    return done


def _worker(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_work, spec, ready)


async def _work(spec: dict[str, Any], ready: Any) -> Any:
    """``bench_commands.py``'s daemon workload on the combats made by ``_prepare``, one per
    connection, with request ids of this window's own (``tag``)."""
    conns = await tk.open_many(Path(spec["socket"]), spec["conns"])
    combats = {id(c): WORKLOAD_COMBAT.format(i) for i, c in enumerate(conns)}
    call = tk.condition_calls(combats, f"{spec['tag']}-")
    await anyio.to_thread.run_sync(ready)
    result = await tk.closed_loop(conns, call, spec["warmup"], spec["seconds"])
    for c in conns:
        await c.aclose()
    return result


async def _prepare(sock: Path, connections: int) -> None:
    """The workload's combats, one per connection, each with the combatant it targets."""
    conn = await tk.Conn.open(sock)
    for i in range(connections):
        combat = WORKLOAD_COMBAT.format(i)
        await conn.call(
            "create_combat", {"request_id": f"{combat}-c", "combat_id": combat, "ruleset": "marvel"}
        )
        await conn.call(
            "add_combatant",
            {"request_id": f"{combat}-a", "combat": combat, "id": "k", "display_name": "K"},
        )
    await conn.aclose()


def _grow(server: tk.Server, first: int, last: int) -> float:
    """Create combats number ``first`` to ``last - 1``, a chunk at a time; return the commands/s
    it went at."""
    if last <= first:
        return float("nan")
    started = time.perf_counter()
    for chunk in range(first, last, CREATE_CHUNK):
        names = [f"s{n:06d}" for n in range(chunk, min(last, chunk + CREATE_CHUNK))]
        shares = tk.split(len(names), CREATORS)
        specs, at = [], 0
        for i, conns in enumerate(tk.split(CREATOR_CONNECTIONS, CREATORS)):
            mine = names[at : at + shares[i]]
            specs.append({"socket": str(server.socket_path), "conns": conns, "combats": mine})
            at += shares[i]
        chunk_started = time.perf_counter()
        assert sum(tk.run_workers(_creator, specs)) == len(names)
        rate = len(names) / (time.perf_counter() - chunk_started)
        print(f"  {chunk + len(names):,} combats created ({tk.fmt(rate)} /s)", flush=True)
    return (last - first) / (time.perf_counter() - started)


def _load(server: tk.Server, args: argparse.Namespace, tag: str) -> tk.LoopFigures:
    spec = {
        "socket": str(server.socket_path),
        "conns": args.connections,
        "tag": tag,
        "warmup": args.warmup,
        "seconds": args.seconds,
    }
    return tk.measure_loop(server, _worker, [spec], args.warmup, args.seconds)


async def _list_one(sock: Path) -> None:
    conn = await tk.Conn.open(sock)
    await conn.call("list_combats", {"limit": 1})
    await conn.aclose()


def _start(server: tk.Server) -> tuple[float, float]:
    """Start; seconds until the socket accepts and until ``list_combats`` answers."""
    server.start()
    anyio.run(_list_one, server.socket_path)
    return server.listening_after, time.perf_counter() - server.started_at


def _print(label: str, f: tk.LoopFigures) -> None:
    print(
        f"{label}: {f.calls_per_s:7.0f}/s p50={f.p50_ms:.2f} ms p99={f.p99_ms:.2f} ms "
        f"server_cpu={f.server_cpu:.2f} ({f.cpu_us_per_call:.0f} µs/command)",
        flush=True,
    )


def main() -> None:
    parser = tk.command_load_parser("command latency with many resident combats")
    parser.add_argument("--combats", type=int, nargs="+", default=[100, TARGET_COMBATS, 100_000])
    args = parser.parse_args()
    print(tk.machine())
    root = tk.workdir("scale")
    levels: dict[int, list[tk.LoopFigures]] = {}
    server = tk.daemon(root).start()
    anyio.run(_prepare, server.socket_path, args.connections)
    made = args.connections
    try:
        for level in args.combats:
            rate = _grow(server, made, level)
            made = max(made, level)
            print(
                f"{level:,} combats resident (created at {tk.fmt(rate)} /s); "
                f"VmRSS {server.rss_kib():,} KiB",
                flush=True,
            )
            for rep in range(args.reps):
                figures = _load(server, args, f"l{level}r{rep}")
                levels.setdefault(level, []).append(figures)
                _print(f"  rep {rep}", figures)
    finally:
        server.stop()
    empty = tk.daemon(tk.workdir("scale-empty"))
    try:
        empty_listen, empty_list = _start(empty)
    finally:
        empty.stop()
    again = tk.daemon(root, log_name="daemon-restart.log")
    restarted: list[tk.LoopFigures] = []
    try:
        listen, listed = _start(again)
        rss_started = again.rss_kib()
        print(
            f"restart on {made:,} combats: listening after {listen:.2f} s, list_combats after "
            f"{listed:.2f} s (empty dir: {empty_listen:.2f} / {empty_list:.2f} s); "
            f"VmRSS {rss_started:,} KiB",
            flush=True,
        )
        for rep in range(args.reps):
            figures = _load(again, args, f"restart{rep}")
            restarted.append(figures)
            _print(f"  rep {rep}", figures)
        rss_served = again.rss_kib()
    finally:
        again.stop()

    def med(figures: list[tk.LoopFigures], key: str) -> float:
        return tk.median([getattr(f, key) for f in figures])

    base = levels[args.combats[0]]
    print(
        f"\n{args.connections} connections, commands as in bench_commands.py; baseline "
        f"{args.combats[0]:,} combats; medians of {args.reps} windows per level\n"
    )
    rows = []
    for level, figures in [*levels.items(), (f"{made:,} after restart", restarted)]:
        ratio = med(figures, "p50_ms") / med(base, "p50_ms")
        met = ""
        if level == TARGET_COMBATS:
            met = "yes" if ratio <= TARGET_P50_RATIO else "no"
        rows.append(
            [
                f"{level:,}" if isinstance(level, int) else level,
                tk.fmt(med(figures, "calls_per_s")),
                tk.fmt(med(figures, "p50_ms")),
                tk.fmt(med(figures, "p99_ms")),
                tk.fmt(med(figures, "cpu_us_per_call"), 1),
                f"{ratio:.2f}x",
                f"{med(figures, 'cpu_us_per_call') / med(base, 'cpu_us_per_call'):.2f}x",
                met,
            ]
        )
    print(
        tk.table(
            [
                "resident combats",
                "commands/s",
                "p50 ms",
                "p99 ms",
                "server µs/command",
                "p50 / base",
                "CPU / base",
                f"p50 ≤ {TARGET_P50_RATIO}x?",
            ],
            rows,
        )
    )
    print(
        f"\nrestart on {made:,} combats: socket accepts after {listen:.2f} s, list_combats after "
        f"{listed:.2f} s (empty data dir, same run: {empty_listen:.2f} s / {empty_list:.2f} s); "
        f"VmRSS {rss_started:,} KiB when listed, {rss_served:,} KiB after serving"
    )


if __name__ == "__main__":
    main()
