"""Resident memory per combat: create 10,000 combats of 10 combatants through the protocol (many
connections at once), read the daemon's VmRSS before and after, divide.

The baseline is the idle daemon's own VmRSS (read before the load, in the same run).

    python bench/bench_memory.py --combats 10000 --reps 1

Target: at most 50 KB (here KiB, the unit of /proc) per combat.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

COMBATANTS = 10
TARGET_KIB = 50.0
SETTLE_SECONDS = 1.0
"""Pause before reading VmRSS: the last replies and closed connections are let go."""


def _creator(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_create, spec, ready)


async def _create(spec: dict[str, Any], ready: Any) -> int:
    """Each connection creates its share of the combats, one command at a time."""
    conns = await tk.open_many(Path(spec["socket"]), spec["conns"])
    await anyio.to_thread.run_sync(ready)
    combats: list[str] = spec["combats"]
    done = 0

    async def one(conn: tk.Conn, mine: list[str]) -> None:
        nonlocal done
        for combat in mine:
            await conn.call(
                "create_combat",
                {"request_id": f"{combat}-c", "combat_id": combat, "ruleset": "marvel"},
            )
            for i in range(COMBATANTS):
                await conn.call(
                    "add_combatant",
                    {
                        "request_id": f"{combat}-{i}",
                        "combat": combat,
                        "id": f"k{i}",
                        "display_name": f"Combatant {i}",
                        "init_mod": i % 4,
                    },
                )
            done += 1

    async with anyio.create_task_group() as tg:
        for n, conn in enumerate(conns):
            tg.start_soon(one, conn, combats[n :: len(conns)])
    for conn in conns:
        await conn.aclose()
    return done


def _run(server: tk.Server, names: list[str], args: argparse.Namespace) -> float:
    per_proc = tk.split(len(names), args.procs)
    conns = tk.split(args.connections, args.procs)
    specs, at = [], 0
    for i in range(args.procs):
        specs.append(
            {
                "socket": str(server.socket_path),
                "conns": conns[i],
                "combats": names[at : at + per_proc[i]],
            }
        )
        at += per_proc[i]
    started = time.perf_counter()
    created = sum(tk.run_workers(_creator, specs))
    assert created == len(names), (created, len(names))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description="daemon VmRSS per combat")
    parser.add_argument("--combats", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    print(tk.machine())
    names = [f"m{n:05d}" for n in range(args.combats)]
    rows: list[dict[str, float]] = []
    for rep in range(args.reps):
        server = tk.daemon(tk.workdir(f"memory-{rep}")).start()
        try:
            time.sleep(SETTLE_SECONDS)
            before = server.rss_kib()
            seconds = _run(server, names, args)
            time.sleep(SETTLE_SECONDS)
            after = server.rss_kib()
        finally:
            server.stop()
        rows.append({"before": before, "after": after, "seconds": seconds})
        print(
            f"rep {rep}: VmRSS {before:,} KiB -> {after:,} KiB (+{after - before:,}) after "
            f"{args.combats * (COMBATANTS + 1):,} commands in {seconds:.1f} s",
            flush=True,
        )

    def med(key: str) -> float:
        return tk.median([r[key] for r in rows])

    per_combat = tk.median([(r["after"] - r["before"]) / args.combats for r in rows])
    rate = args.combats * (COMBATANTS + 1) / med("seconds")
    print(f"\n{args.combats:,} combats of {COMBATANTS}; medians of {args.reps} repetitions\n")
    print(
        tk.table(
            ["figure", "measured", "baseline", "ratio", "target", "met?"],
            [
                [
                    "VmRSS (KiB)",
                    tk.fmt(med("after")),
                    tk.fmt(med("before")),
                    f"{med('after') / med('before'):.1f}x",
                    "",
                    "",
                ],
                [
                    "KiB per combat",
                    tk.fmt(per_combat, 1),
                    "",
                    "",
                    f"≤ {TARGET_KIB:g}",
                    "yes" if per_combat <= TARGET_KIB else f"no ({per_combat / TARGET_KIB:.1f}x)",
                ],
                ["commands/s while creating", tk.fmt(rate), "", "", "", ""],
            ],
        )
    )


if __name__ == "__main__":
    main()
