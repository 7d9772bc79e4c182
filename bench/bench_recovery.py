"""Recovery: wall time from ``turnkeeper serve`` starting on a data dir of ~1,000,000 events to its
socket answering ``list_combats``, with the default ``--snapshot-every``.

The data dir is built directly, not through the socket (a million events through the daemon
takes minutes here): the real engine plays each combat (``decide`` then
``evolve``, seeded dice), and the rows are written exactly as ``store.py`` writes them: the schema
comes from ``Store.open``, each event body is msgpack of ``plain.event_to_plain``, and a snapshot
(msgpack of ``plain.to_shared(state)``) replaces the previous one whenever a command's batch
brings the combat ``SNAPSHOT_EVERY`` or more events past it, as the hub's commit port
(``combats.writer._CombatLog.commit``) does. The remembered-requests table stays empty:
start-up never reads it.
With ``TURNKEEPER_BENCH_CHECKOUT`` set, that checkout's own code builds the data dir, in a
process with its sources first on the path: an older daemon refuses a newer schema.

Each combat gets a number of events drawn uniformly around the mean (half to one and a half
times), so about half the combats start from a snapshot plus a tail and half replay from zero.
The baseline is the same daemon starting on an empty data dir, in the same repetition. While
the daemon rebuilds its combats behind the socket, a one-row ``list_combats`` probes it every
10 ms: its latency is how long a request waits behind a rebuild.

With ``--old-snapshots`` every snapshot is as a daemon from before states counted their events
wrote it (an upgrade): the first start replays every log and stores fresh snapshots, and each
repetition starts a copy of the data dir twice, to show what the second start costs.

    python bench/bench_recovery.py --events 1000000 --combats 1000 --reps 3
    python bench/bench_recovery.py --old-snapshots --data-dir /tmp/old-data --reps 3

Target: at most 2 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import tkbench as tk

from turnkeeper.store import DB_FILE, Store
from turnkeeper_engine import Actor, RuleError, SeededDice, State, decide, evolve, next_deadline
from turnkeeper_engine import commands as cmd
from turnkeeper_engine.model import TurnRef
from turnkeeper_engine.plain import event_to_plain, to_shared

try:
    from turnkeeper.combats.rebuild import SNAPSHOT_EVERY
    from turnkeeper.combats.registry import MAX_COMBAT_PAGE
    from turnkeeper_engine import BUNDLED_RULES

    DECIDE_RULES: dict[str, Any] = {"rules": BUNDLED_RULES}
except ImportError:
    # The builder of a checkout from before the layered daemon (7bcdbb2), run with its sources
    # first on the path (``TURNKEEPER_BENCH_CHECKOUT``): its constants lived in ``host``, and
    # its ``decide`` found the bundled rules itself.
    from turnkeeper.host import MAX_COMBAT_PAGE, SNAPSHOT_EVERY  # type: ignore[no-redef]

    DECIDE_RULES = {}

TARGET_SECONDS = 2.0
COMBATANTS = 10
NARRATOR = Actor("narrator")
INSERT_EVERY = 50_000
"""Rows buffered before one executemany: bounds the builder's memory."""


def _play(
    combat: str, events: int, seed: int, start: float, old: bool
) -> tuple[list[bytes], Any, bytes]:
    """One combat played by the real engine until it has at least ``events`` events: its
    event bodies, the (seq, body) of its last snapshot (or None), and its stored summary.
    With ``old``, the snapshot's state has ``seq`` 0 and no ``secrets``, as written before
    states counted their events (R16): the daemon passes it over and replays the log."""
    dice = SeededDice(seed)
    state = State()
    now = start
    bodies: list[bytes] = []
    snapshot: tuple[int, bytes] | None = None
    snapshot_seq = 0

    def run(command: cmd.Command) -> None:
        nonlocal state, snapshot, snapshot_seq
        decided = decide(state, command, now, actor=NARRATOR, dice=dice, **DECIDE_RULES)
        if isinstance(decided, RuleError):
            raise RuntimeError(f"{combat}: {command} refused: {decided}")
        for event in decided:
            state = evolve(state, event)
            bodies.append(msgpack.packb(event_to_plain(event), use_bin_type=True))
        if len(bodies) - snapshot_seq >= SNAPSHOT_EVERY:
            snapshot_seq = len(bodies)
            shot = dataclasses.replace(state, seq=0, secrets=()) if old else state
            snapshot = (snapshot_seq, msgpack.packb(to_shared(shot), use_bin_type=True))

    run(cmd.CreateCombat(combat, "marvel"))
    for i in range(COMBATANTS):
        run(cmd.AddCombatant(f"k{i}", f"Combatant {i}", init_mod=i % 4))
    run(cmd.StartCombat())
    while len(bodies) < events:
        now += 6.0
        turn = state.turn
        assert turn is not None
        if len(bodies) % 3 == 0:
            run(cmd.ApplyCondition(target=turn.combatant, type="custom"))
        else:
            run(cmd.EndTurn(TurnRef(turn.round, turn.combatant)))
    summary = {
        "ruleset": state.ruleset,
        "phase": state.phase,
        "round": state.round,
        "seq": len(bodies),
        "deadline": next_deadline(state),
    }
    return bodies, snapshot, msgpack.packb(summary, use_bin_type=True)


def build(data_dir: Path, events: int, combats: int, seed: int, old: bool) -> tuple[int, float]:
    """Write the data dir; returns the events written and the seconds it took. With ``old``,
    each snapshot is as a daemon from before states counted their events wrote it."""
    started = time.perf_counter()
    shutil.rmtree(data_dir, ignore_errors=True)
    Store.open(data_dir).close()  # the daemon's own schema
    db = sqlite3.connect(data_dir / DB_FILE, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")  # building is not what is measured
    rng = random.Random(seed)
    mean = events / combats
    total = 0
    rows: list[tuple[str, int, bytes]] = []
    db.execute("BEGIN")
    for n in range(combats):
        combat = f"rec{n:05d}"
        target = rng.randint(int(mean / 2), int(mean * 3 / 2))
        at = 1_700_000_000.0 + n
        bodies, snapshot, summary = _play(combat, target, seed + n, at, old)
        db.execute(
            "INSERT INTO combats (combat_id, ruleset, created_at) VALUES (?, ?, ?)",
            (combat, "marvel", at),
        )
        db.execute("INSERT INTO summaries (combat_id, body) VALUES (?, ?)", (combat, summary))
        rows.extend((combat, seq, body) for seq, body in enumerate(bodies, start=1))
        if snapshot is not None:
            db.execute(
                "INSERT INTO snapshots (combat_id, seq, body) VALUES (?, ?, ?)", (combat, *snapshot)
            )
        total += len(bodies)
        if len(rows) >= INSERT_EVERY:
            db.executemany("INSERT INTO events (combat_id, seq, body) VALUES (?, ?, ?)", rows)
            rows.clear()
        if n % 100 == 99:
            print(f"  built {n + 1} combats, {total:,} events", flush=True)
    db.executemany("INSERT INTO events (combat_id, seq, body) VALUES (?, ?, ?)", rows)
    db.execute("COMMIT")
    db.close()
    return total, time.perf_counter() - started


async def _list(sock: Path) -> list[Any]:
    """Every combat's row, a page at a time (the first page is the start-up's answer)."""
    conn = await tk.Conn.open(sock)
    combats: list[Any] = []
    params: dict[str, Any] = {"limit": MAX_COMBAT_PAGE}
    while True:
        page = await conn.call("list_combats", params)
        combats += page
        if len(page) < MAX_COMBAT_PAGE:
            break
        params = {"limit": MAX_COMBAT_PAGE, "after": page[-1]["combat"]}
    await conn.aclose()
    return combats


REBUILD_TIMEOUT = 300.0
"""Longest wait for the daemon to report every combat rebuilt."""


def _rebuilt_lines(log: Path) -> int:
    if not log.exists():
        return 0
    return sum('"combats_rebuilt"' in line for line in log.read_text(errors="replace").splitlines())


PROBE_EVERY = 0.01
"""Seconds between two probes of the event loop while the daemon rebuilds."""


async def _probe(sock: Path, log: Path, before: int) -> list[float]:
    """Latencies (s) of a one-row ``list_combats``, asked every PROBE_EVERY until the daemon
    logs that every combat is rebuilt: how long a request waits behind the rebuild."""
    conn = await tk.Conn.open(sock)
    latencies: list[float] = []
    deadline = time.monotonic() + REBUILD_TIMEOUT
    while _rebuilt_lines(log) == before and time.monotonic() < deadline:
        sent = time.perf_counter()
        await conn.call("list_combats", {"limit": 1})
        latencies.append(time.perf_counter() - sent)
        await anyio.sleep(PROBE_EVERY)
    await conn.aclose()
    return latencies


def start_up(root: Path, data_dir: Path) -> tuple[float, float, list[Any], list[float]]:
    """Seconds from process start to every page of ``list_combats`` answered, seconds until
    the daemon logs that every combat is rebuilt, the ``list_combats`` rows, and the latencies
    of the requests probing the daemon meanwhile."""
    server = tk.daemon(root, data_dir=data_dir)
    before = _rebuilt_lines(server.log_path)
    try:
        server.start()
        combats = anyio.run(_list, server.socket_path)
        seconds = time.perf_counter() - server.started_at
        latencies = anyio.run(_probe, server.socket_path, server.log_path, before)
        rebuilt = time.perf_counter() - server.started_at
    finally:
        server.stop()
    return seconds, rebuilt, combats, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description="daemon start-up time on a large log")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--combats", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=616)
    parser.add_argument(
        "--data-dir", type=Path, help="reuse (or build once into) this data dir instead of /tmp"
    )
    parser.add_argument(
        "--old-snapshots",
        action="store_true",
        help="snapshots as written before states counted their events (an upgrade's first start"
        " replays every log); each repetition then starts on a fresh copy and is started twice",
    )
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    print(tk.machine())
    root = tk.workdir("recovery")
    data_dir = args.data_dir or root / "data"
    old = "-old" if args.old_snapshots else ""
    marker = data_dir / f"built-{args.events}-{args.combats}-{args.seed}{old}"
    if args.build_only:
        written, seconds = build(data_dir, args.events, args.combats, args.seed, bool(old))
        print(f"built {written:,} events in {seconds:.1f} s")
        return
    if not marker.exists():
        print(f"building {data_dir} ({args.events:,} events over {args.combats} combats)")
        # Another checkout's daemon reads only the schema and encodings its own store writes:
        # its own code builds the data dir, in a process with its sources first on the path.
        builder = [sys.executable, __file__, "--build-only", "--data-dir", str(data_dir)]
        for option in ("events", "combats", "seed"):
            builder += [f"--{option}", str(getattr(args, option))]
        subprocess.run(
            builder + (["--old-snapshots"] if old else []), env=tk.daemon_env(), check=True
        )
        marker.touch()
    size = (data_dir / DB_FILE).stat().st_size
    db = sqlite3.connect(data_dir / DB_FILE)
    (stored,) = db.execute("SELECT count(*) FROM events").fetchone()
    (snapshots, tails) = db.execute(
        "SELECT count(*), coalesce(sum(m.top - s.seq), 0) FROM snapshots s JOIN"
        " (SELECT combat_id, max(seq) AS top FROM events GROUP BY combat_id) m USING (combat_id)"
    ).fetchone()
    db.close()
    replayed = stored - sum(
        0 if s is None else s
        for (s,) in sqlite3.connect(data_dir / DB_FILE).execute("SELECT seq FROM snapshots")
    )
    print(
        f"{stored:,} events, {snapshots} snapshots, {replayed:,} events to replay "
        f"(snapshot tails {tails:,}), {size / 2**20:.0f} MiB"
    )
    runs: list[tuple[float, float, float, float, float, float]] = []
    for rep in range(args.reps):
        empty_root = tk.workdir(f"recovery-empty-{rep}")
        empty = start_up(empty_root, empty_root / "data")[0]
        run_root = tk.workdir(f"recovery-run-{rep}")
        used = data_dir
        if old:
            # The first start may store fresh snapshots: each repetition upgrades its own copy.
            used = run_root / "data"
            shutil.rmtree(used, ignore_errors=True)
            shutil.copytree(data_dir, used)
        full, rebuilt, combats, latencies = start_up(run_root, used)
        seqs = sum(c.get("seq", 0) for c in combats)
        bad = sum(1 for c in combats if "quarantined" in c)
        if seqs != stored or bad:
            raise RuntimeError(f"recovered {seqs} of {stored} events, {bad} quarantined")
        again = start_up(run_root, used)[1] if old else 0.0
        p99 = tk.percentile(latencies, 99) * 1000
        worst = max(latencies, default=0.0) * 1000
        runs.append((full, empty, rebuilt, again, p99, worst))
        print(
            f"rep {rep}: {full:.2f} s ({len(combats)} combats, {seqs:,} events); "
            f"every combat rebuilt at {rebuilt:.2f} s; empty {empty:.2f} s; "
            f"{len(latencies)} probes meanwhile: p99 {p99:.1f} ms, max {worst:.1f} ms"
            + (f"; second start rebuilt at {again:.2f} s" if old else "")
        )
    full = tk.median([r[0] for r in runs])
    empty = tk.median([r[1] for r in runs])
    rebuilt = tk.median([r[2] for r in runs])
    again = tk.median([r[3] for r in runs])
    p99 = tk.median([r[4] for r in runs])
    worst = tk.median([r[5] for r in runs])
    print(
        f"\n{stored:,} events, snapshot every {SNAPSHOT_EVERY}"
        f"{', old snapshots' if old else ''}; medians of {args.reps} repetitions\n"
    )
    rows = [
        [
            "start to list_combats (s)",
            f"{full:.2f}",
            f"{empty:.2f}",
            f"{full / empty:.1f}x",
            f"≤ {TARGET_SECONDS:g}",
            "yes" if full <= TARGET_SECONDS else f"no ({full / TARGET_SECONDS:.1f}x)",
        ],
        ["recovery net of empty start (s)", f"{full - empty:.2f}", "", "", "", ""],
        ["start to every combat rebuilt (s)", f"{rebuilt:.2f}", "", "", "", ""],
        ["list_combats latency while rebuilding, p99 (ms)", f"{p99:.1f}", "", "", "", ""],
        ["list_combats latency while rebuilding, max (ms)", f"{worst:.1f}", "", "", "", ""],
    ]
    if old:
        rows.append(["second start to every combat rebuilt (s)", f"{again:.2f}", "", "", "", ""])
    print(tk.table(["figure", "measured", "baseline (empty dir)", "ratio", "target", "met?"], rows))


if __name__ == "__main__":
    main()
