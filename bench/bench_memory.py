"""Resident memory per combat, two ways, each through the protocol with many connections at once:

1. created: 10,000 combats of 10 combatants (11 commands each); the daemon's VmRSS before and
   after, divided by the combats;
2. after 500 commands (issue 11): ``--busy`` combats of 10 combatants, started, then 500
   commands each (``apply_condition`` and ``remove_condition`` in turn, so the combat stays the
   same size while its undo history fills: undo reaches 200 commands back); VmRSS when they
   are started and after the 500 commands, by combat. With ``--tracemalloc``, the same again
   on ``--traced-busy`` combats in a daemon run by ``traced_serve.py``, measured by the Python
   allocations it holds after a garbage collection (no allocator arenas, no SQLite cache),
   split by where they were allocated: by the engine (states and their undo history), by the
   store (among others its memory of recent answers, shared by every combat of a principal and
   bounded in all, and its filter of request ids, 2 MiB however many combats), elsewhere; and
   the store's own count of its recent answers. The split tells a combat's own cost from what
   only looks like one because few combats share it.

The baseline is the idle daemon's own VmRSS (read before the load, in the same run).

    python bench/bench_memory.py --combats 10000 --busy 200 --tracemalloc --reps 1

``--report FILE`` keeps each part-2 measure's details: the resident KiB by kind of mapping
(glibc's main heap, anonymous mappings, the rest) for VmRSS, and for tracemalloc the largest
tracebacks (as deep as ``TURNKEEPER_BENCH_TRACE_FRAMES``) and pymalloc's arena statistics.

Target: at most 50 KB (here KiB, the unit of /proc) per combat, after 500 commands (issue 11).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import tkbench as tk
import traced_serve

COMBATANTS = 10
TARGET_KIB = 50.0
BUSY_COMMANDS = 500
"""Commands each part-2 combat gets after its start: well past the 200 that undo reaches."""
SETTLE_SECONDS = 2.0
"""Pause before reading VmRSS: the last replies and closed connections are let go, and what
they freed given back (``turnkeeper.transport.trim.TRIM_DELAY`` after the last close)."""


def _creator(spec: dict[str, Any], ready: Any, _stop: Any) -> Any:
    return anyio.run(_create, spec, ready)


async def _create(spec: dict[str, Any], ready: Any) -> int:
    """Each connection creates its share of the combats, one command at a time; or, with
    ``commands`` in the spec, starts each of them and sends it that many commands."""
    conns = await tk.open_many(Path(spec["socket"]), spec["conns"])
    await anyio.to_thread.run_sync(ready)
    combats: list[str] = spec["combats"]
    done = 0

    async def one(conn: tk.Conn, mine: list[str]) -> None:
        nonlocal done
        for combat in mine:
            if spec["commands"]:
                await _busy(conn, combat, spec["commands"])
                done += 1
                continue
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


async def _busy(conn: tk.Conn, combat: str, commands: int) -> None:
    await conn.call("start_combat", {"request_id": f"{combat}-s", "combat": combat})
    condition = ""
    for n in range(commands):
        params: dict[str, Any] = {"combat": combat, "request_id": f"{combat}-b{n}"}
        if n % 2 == 0:
            params |= {"target": "k0", "type": "custom", "note": f"bench {n}"}
            result = await conn.call("apply_condition", params)
            made = next(e for e in result["events"] if e["event"] == "condition_applied")
            condition = made["condition"]["id"]
        else:
            await conn.call("remove_condition", params | {"condition": condition})


def _run(server: tk.Server, names: list[str], args: argparse.Namespace, commands: int = 0) -> float:
    per_proc = tk.split(len(names), args.procs)
    conns = tk.split(args.connections, args.procs)
    specs, at = [], 0
    for i in range(args.procs):
        specs.append(
            {
                "socket": str(server.socket_path),
                "conns": conns[i],
                "combats": names[at : at + per_proc[i]],
                "commands": commands,
            }
        )
        at += per_proc[i]
    started = time.perf_counter()
    created = sum(tk.run_workers(_creator, specs))
    assert created == len(names), (created, len(names))
    return time.perf_counter() - started


def _created(args: argparse.Namespace) -> list[list[str]]:
    """Part 1, per repetition; the rows of its table."""
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
    return [
        [
            f"{args.combats:,} created: VmRSS (KiB)",
            tk.fmt(med("after")),
            tk.fmt(med("before")),
            f"{med('after') / med('before'):.1f}x",
            "",
            "",
        ],
        [f"{args.combats:,} created: KiB per combat", tk.fmt(per_combat, 1), "", "", "", ""],
        ["commands/s while creating", tk.fmt(rate), "", "", "", ""],
    ]


def _mappings(pid: int) -> dict[str, int]:
    """The process's resident KiB by kind of mapping (/proc/<pid>/smaps): the main heap
    (``brk``, where glibc's main arena and pymalloc's small arenas below its mmap threshold
    go), anonymous mappings (pymalloc's 1 MiB arenas, other glibc arenas such as a thread's,
    large blocks) and the rest (code, libraries, files)."""
    kinds = {"heap": 0, "anon": 0, "other": 0}
    kind = "other"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=6)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
            name = head[5] if len(head) > 5 else ""
            kind = "heap" if name == "[heap]" else "anon" if not name else "other"
        elif line.startswith("Rss:"):
            kinds[kind] += int(head[1])
    return kinds


def _traced(server: tk.Server, out: Path) -> dict[str, float]:
    """The traced daemon's Python allocations, in KiB, after a garbage collection: in all
    (``total``), by part (see ``traced_serve.PARTS``), and the store's recent answers."""
    out.unlink(missing_ok=True)
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.monotonic() + tk.CALL_TIMEOUT
    while not out.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the traced daemon did not report its allocations")
        time.sleep(0.05)
    report = json.loads(out.read_text())
    if REPORT is not None:
        REPORT.append(report)
    kib = {part: float(size) / 1024 for part, size in report["by_part"].items()}
    return {"total": report["current"] / 1024, **kib, "recent": report["recent_answers"] / 1024}


TRACED_PARTS = {
    "engine": "allocated by the engine (states, undo)",
    "store": "allocated by the store (recent answers, …)",
    "recent": "the store's recent answers, by its count",
    "other": "allocated elsewhere",
}
"""The per-combat rows the tracemalloc pass adds for each part of its growth."""


REPORT: list[Any] | None = None
"""With ``--report``, what each measure saw beyond its total: the VmRSS passes' mappings
(``_mappings``), the tracemalloc pass's whole report (largest tracebacks, pymalloc's arenas)."""


def _busy_rows(args: argparse.Namespace, traced: bool) -> list[list[str]]:
    """Part 2, per repetition, measured by VmRSS or, ``traced``, by tracemalloc in a daemon run
    by ``traced_serve.py``; the rows of its table."""
    busy = args.traced_busy if traced else args.busy
    names = [f"b{n:05d}" for n in range(busy)]
    what = "tracemalloc" if traced else "VmRSS"
    rows: list[dict[str, dict[str, float]]] = []
    seconds: list[float] = []
    for rep in range(args.reps):
        root = tk.workdir(f"memory-busy-{rep}-{what}")
        out = root / "traced.json"
        if traced:
            os.environ[traced_serve.OUT_VARIABLE] = str(out)
            server = tk.daemon(root, entry=(str(tk.BENCH / "traced_serve.py"),))
        else:
            server = tk.daemon(root)
        server.start()

        def measure(server: tk.Server = server, out: Path = out) -> dict[str, float]:
            time.sleep(SETTLE_SECONDS)
            if traced:
                return _traced(server, out)
            measured = {"total": float(server.rss_kib())}
            if REPORT is not None:
                REPORT.append(_mappings(server.pid))
            return measured

        try:
            idle = measure()
            _run(server, names, args)
            started = measure()
            seconds.append(_run(server, names, args, BUSY_COMMANDS))
            after = measure()
        finally:
            server.stop()
        rows.append({"idle": idle, "started": started, "after": after})
        grown = ", ".join(f"{p} +{after[p] - started[p]:,.0f}" for p in TRACED_PARTS if traced)
        print(
            f"rep {rep}: {busy} combats, {what} idle {idle['total']:,.0f} KiB, started "
            f"{started['total']:,.0f} KiB, after {BUSY_COMMANDS} commands each "
            f"{after['total']:,.0f} KiB{f' ({grown})' if traced else ''} "
            f"({busy * BUSY_COMMANDS / seconds[-1]:.0f} commands/s)",
            flush=True,
        )

    def per_combat(frm: str, to: str, part: str = "total") -> float:
        return tk.median([(r[to][part] - r[frm][part]) / busy for r in rows])

    total = per_combat("idle", "after")
    at_start = per_combat("idle", "started")
    label = f"{busy} after {BUSY_COMMANDS} commands ({what})"
    table = [
        [
            f"{label}: KiB per combat",
            tk.fmt(total, 1),
            tk.fmt(at_start, 1),
            f"{total / at_start:.1f}x" if at_start > 0 else "",
            f"≤ {TARGET_KIB:g}",
            "yes" if total <= TARGET_KIB else f"no ({total / TARGET_KIB:.1f}x)",
        ],
        [
            f"… of which grown over the {BUSY_COMMANDS} commands",
            tk.fmt(per_combat("started", "after"), 1),
            "",
            "",
            "",
            "",
        ],
    ]
    if traced:
        for part, words in TRACED_PARTS.items():
            table.append(
                [
                    f"… {words}",
                    tk.fmt(per_combat("idle", "after", part), 1),
                    tk.fmt(per_combat("idle", "started", part), 1),
                    "",
                    "",
                    "",
                ]
            )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description="daemon VmRSS per combat")
    parser.add_argument("--combats", type=int, default=10_000, help="part 1: combats created")
    parser.add_argument("--busy", type=int, default=200, help="part 2: combats given 500 commands")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--tracemalloc", action="store_true", help="part 2 again, measured by tracemalloc"
    )
    parser.add_argument(
        "--traced-busy",
        type=int,
        default=20,
        help="combats of the tracemalloc pass: tracing slows the daemon, and Python's own "
        "allocations need no crowd to rise above the noise that VmRSS has",
    )
    parser.add_argument(
        "--report", type=Path, help="write the details of each measure of part 2 here (JSON)"
    )
    args = parser.parse_args()
    global REPORT
    REPORT = [] if args.report else None
    print(tk.machine())
    rows = _created(args) if args.combats else []
    if args.busy:
        rows += _busy_rows(args, traced=False)
        if args.tracemalloc:
            rows += _busy_rows(args, traced=True)
    print(
        f"\ncombats of {COMBATANTS} combatants; baseline: the idle daemon (part 1), the started "
        f"combats (part 2); medians of {args.reps} repetitions\n"
    )
    print(tk.table(["figure", "measured", "baseline", "ratio", "target", "met?"], rows))
    if args.report:
        args.report.write_text(json.dumps(REPORT, indent=1))


if __name__ == "__main__":
    main()
