"""The store port (``turnkeeper.stores.port``), one suite for every store: the embedded SQLite
file and a real PostgreSQL database. What is committed survives a reopen, concurrent commands
share transactions, a refused batch is refused alone, a failed one leaves nothing behind, and
a damaged log is found in its own combat only."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import psycopg
import pytest

from turnkeeper.store import DB_FILE, MAX_EVENTS_PER_READ, Batch, LoadedCombat, Store, StoreError
from turnkeeper.stores.port import StorePort
from turnkeeper.stores.postgresql import SCHEMA, PostgresStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Backend:
    """One store under test, with what a test needs to damage it behind the store's back."""

    name: str

    def open(self, *, quota: bool = False) -> StorePort:
        """The store; with ``quota``, one that fits its schema and a few small commits more,
        not a batch of a few hundred KiB."""
        raise NotImplementedError

    def execute(self, sql: str, *params: Any) -> None:
        """Run SQL on the store's own tables (``{t}`` is their qualifier), by hand."""
        raise NotImplementedError

    def corrupt(self, combat_id: str, seq: int) -> None:
        self.execute(
            "UPDATE {t}events SET body = ? WHERE combat_id = ? AND seq = ?",
            b"\xc1garbage",
            combat_id,
            seq,
        )

    def count_events(self) -> int:
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def open(self, *, quota: bool = False) -> StorePort:
        if not quota:
            return Store.open(self.data_dir)
        Store.open(self.data_dir).close()  # the schema's own pages, before the limit applies
        with closing(sqlite3.connect(self.data_dir / DB_FILE)) as db:
            (pages,) = db.execute("PRAGMA page_count").fetchone()
        return Store.open(self.data_dir, max_pages=pages + 4)

    def execute(self, sql: str, *params: Any) -> None:
        with closing(sqlite3.connect(self.data_dir / DB_FILE)) as db, db:
            db.execute(sql.format(t=""), params)

    def count_events(self) -> int:
        with closing(sqlite3.connect(self.data_dir / DB_FILE)) as db:
            return int(db.execute("SELECT count(*) FROM events").fetchone()[0])


class PostgresBackend(Backend):
    name = "postgresql"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def open(self, *, quota: bool = False) -> StorePort:
        if not quota:
            return PostgresStore.open(self.dsn)
        store = PostgresStore.open(self.dsn)
        size = store._size()
        store.close()
        # Room for the pages the first rows take in each table and index, not for 400 KiB.
        return PostgresStore.open(self.dsn, max_bytes=size + 160 * 2**10)

    def execute(self, sql: str, *params: Any) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as db:
            db.execute(sql.format(t=f"{SCHEMA}.").replace("?", "%s"), params)

    def count_events(self) -> int:
        with psycopg.connect(self.dsn) as db:
            row = db.execute(f"SELECT count(*) FROM {SCHEMA}.events").fetchone()
            assert row is not None
            return int(row[0])


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield SqliteBackend(tmp_path / "data")
    else:
        yield PostgresBackend(request.getfixturevalue("postgres_db"))


def event(n: int, pad: str = "") -> dict[str, Any]:
    return {"type": "round_started", "round": n, "pad": pad, "ok": True, "x": 1.5, "none": None}


def batch(
    combat_id: str,
    first_seq: int,
    count: int = 1,
    *,
    create: bool = False,
    request: tuple[str, str] | None = None,
    response: Any = None,
    at: float = 1000.0,
    pad: str = "",
) -> Batch:
    return Batch(
        combat_id=combat_id,
        first_seq=first_seq,
        events=tuple(event(first_seq + i, pad) for i in range(count)),
        ruleset="marvel" if create else None,
        request=request,
        response=response,
        at=at,
    )


@asynccontextmanager
async def running(store: StorePort) -> AsyncIterator[StorePort]:
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        yield store
        await store.stop()


def loaded(store: StorePort) -> list[LoadedCombat]:
    """Every combat in creation order, as start-up finds each."""
    return [store.load_one(combat_id) for combat_id, _ in store.summaries()]


def logged(store: StorePort, combat: LoadedCombat) -> list[tuple[int, dict[str, Any]]]:
    """The events a rebuild of ``combat`` replays: those after its snapshot."""
    return list(
        store.replay(combat.combat_id, 0 if combat.snapshot is None else combat.snapshot[0])
    )


@pytest.mark.anyio
async def test_committed_events_survive_a_reopen(backend: Backend) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
        await store.commit(batch("c1", 4, 2))
    store.close()

    store = backend.open()
    [combat] = loaded(store)
    events = logged(store, combat)
    store.close()
    assert (combat.combat_id, combat.ruleset, combat.created_at) == ("c1", "marvel", 1000.0)
    assert events == [(n, event(n)) for n in range(1, 6)]
    assert (combat.snapshot, combat.last) == (None, 5)
    assert combat.warnings == []
    assert combat.quarantined is None


@pytest.mark.anyio
async def test_concurrent_commits_all_land_in_fewer_transactions(backend: Backend) -> None:
    combats = 200
    store = backend.open()
    async with running(store), anyio.create_task_group() as tg:
        for i in range(combats):
            tg.start_soon(store.commit, batch(f"c{i}", 1, 2, create=True))
    assert 1 <= store.transactions < combats
    found = loaded(store)
    assert sorted(c.combat_id for c in found) == sorted(f"c{i}" for i in range(combats))
    assert all(logged(store, c) == [(1, event(1)), (2, event(2))] for c in found)
    store.close()


async def _outcomes(store: StorePort, batches: dict[str, Batch]) -> dict[str, str]:
    """Each batch's outcome ("ok" or its error code), all queued together: one transaction."""
    outcomes: dict[str, str] = {}

    async def commit(name: str, b: Batch) -> None:
        try:
            await store.commit(b)
            outcomes[name] = "ok"
        except StoreError as e:
            outcomes[name] = e.code

    before = store.transactions
    async with anyio.create_task_group() as tg:
        for name, b in batches.items():
            tg.start_soon(commit, name, b)
    assert store.transactions == before + 1
    return outcomes


@pytest.mark.anyio
async def test_a_duplicate_seq_is_a_conflict_for_its_own_batch_only(backend: Backend) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, 2, create=True))
        outcomes = await _outcomes(
            store,
            {
                "duplicate": batch("c1", 2),
                "other": batch("c2", 1, create=True),
                "gap": batch("c1", 5),
                "unknown combat": batch("nowhere", 1),
                "combat twice": batch("c1", 3, create=True),
            },
        )
        await store.commit(batch("c1", 3))  # the store keeps working
    assert outcomes == {
        "duplicate": "conflict",
        "other": "ok",
        "gap": "conflict",
        "unknown combat": "conflict",
        "combat twice": "conflict",
    }
    logs = {c.combat_id: logged(store, c) for c in loaded(store)}
    store.close()
    assert logs == {"c1": [(1, event(1)), (2, event(2)), (3, event(3))], "c2": [(1, event(1))]}


@pytest.mark.anyio
async def test_a_batch_the_database_cannot_hold_fails_alone(backend: Backend) -> None:
    # The protocol refuses NUL in ids (``methods.text``); a store given one anyway (PostgreSQL
    # text cannot hold it) fails that batch alone, never the rest of its transaction.
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        outcomes = await _outcomes(
            store,
            {
                "nul combat": batch("c\x00d", 1, create=True),
                "nul request": batch("c1", 2, request=("alice", "r\x00"), response=2),
                "other": batch("c2", 1, create=True, request=("alice", "r"), response=1),
            },
        )
        await store.commit(batch("c2", 2))  # the store keeps working
    assert outcomes["other"] == "ok"
    if backend.name == "postgresql":
        assert outcomes["nul combat"] == outcomes["nul request"] == "store_failed"
    logs = {c.combat_id: logged(store, c) for c in loaded(store)}
    store.close()
    assert logs["c2"] == [(1, event(1)), (2, event(2))]


@pytest.mark.anyio
async def test_one_request_id_twice_in_a_group_refuses_the_second_batch_alone(
    backend: Backend,
) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        outcomes = await _outcomes(
            store,
            {
                "first": batch("c1", 2, request=("alice", "r"), response=1),
                "other": batch("c2", 1, create=True),
                "second": batch("c1", 3, request=("alice", "r"), response=2),
            },
        )
        assert await store.lookup_request("alice", "r") == ("c1", 1)
        await store.commit(batch("c1", 3))  # the store keeps working, at the right seq
    assert outcomes == {"first": "ok", "other": "ok", "second": "conflict"}
    assert [s for s, _ in logged(store, store.load_one("c1"))] == [1, 2, 3]
    store.close()


@pytest.mark.anyio
async def test_a_remembered_request_answers_after_a_reopen(backend: Backend) -> None:
    response = {"result": [1, "two", None], "seq": 1}
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), response=response))
        with pytest.raises(StoreError) as e:  # the same request id twice
            await store.commit(batch("c1", 2, request=("alice", "r1"), response=response))
    store.close()
    assert e.value.code == "conflict"

    store = backend.open()
    assert await store.lookup_request("alice", "r1") == ("c1", response)
    assert await store.lookup_request("bob", "r1") is None
    [combat] = loaded(store)
    assert logged(store, combat) == [(1, event(1))]
    store.close()


@pytest.mark.anyio
async def test_an_unreadable_last_event_fails_the_replay_and_keeps_its_seq(
    backend: Backend,
) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
    store.close()
    backend.corrupt("c1", 3)

    store = backend.open()
    [combat] = loaded(store)
    assert (combat.quarantined, combat.last) == (None, 3)  # no body is read to load it
    with pytest.raises(StoreError) as unreadable:
        logged(store, combat)
    assert unreadable.value.code == "store_failed"
    assert "event 3 is unreadable" in unreadable.value.message
    async with running(store):
        with pytest.raises(StoreError) as taken:  # the row was kept: its seq is not free again
            await store.commit(batch("c1", 3))
    store.close()
    assert taken.value.code == "conflict"
    assert backend.count_events() == 3


@pytest.mark.anyio
async def test_garbage_or_a_gap_mid_log_is_found_in_that_combat_only(backend: Backend) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(batch("bad", 1, 3, create=True, at=1.0))
        await store.commit(batch("good", 1, 2, create=True, at=2.0))
        await store.commit(batch("gap", 1, 3, create=True, at=3.0))
    store.close()
    backend.corrupt("bad", 2)
    backend.execute("DELETE FROM {t}events WHERE combat_id = 'gap' AND seq = 2")

    store = backend.open()
    bad, good, gap = loaded(store)
    assert bad.combat_id == "bad"
    with pytest.raises(StoreError) as unreadable:
        logged(store, bad)
    assert "event 2 is unreadable" in unreadable.value.message
    assert (good.combat_id, good.quarantined) == ("good", None)
    assert logged(store, good) == [(1, event(1)), (2, event(2))]
    assert gap.quarantined == "seq 2 is missing (next stored is 3)"
    store.close()


@pytest.mark.anyio
async def test_a_full_store_fails_the_whole_transaction_and_keeps_nothing(
    backend: Backend,
) -> None:
    store = backend.open(quota=True)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        with pytest.raises(StoreError) as e:
            await store.commit(batch("c1", 2, 200, pad="x" * 2000))
        assert e.value.code == "store_full"
        await store.commit(batch("c1", 2))  # small enough: the store still works
    [combat] = loaded(store)
    assert logged(store, combat) == [(1, event(1)), (2, event(2))]
    store.close()


@pytest.mark.anyio
async def test_events_after_pages_through_the_log(backend: Backend) -> None:
    total = MAX_EVENTS_PER_READ + 50
    store = backend.open()
    async with running(store):
        await store.commit(batch("c1", 1, total, create=True))
    assert await store.events_after("c1", 0, 3) == [(1, event(1)), (2, event(2)), (3, event(3))]
    assert await store.events_after("c1", total - 1, 10) == [(total, event(total))]
    assert await store.events_after("c1", total, 10) == []
    assert await store.events_after("c1", 0, 0) == []
    assert await store.events_after("nowhere", 0, 10) == []
    seen: list[int] = []
    while page := await store.events_after("c1", seen[-1] if seen else 0, total):
        assert len(page) <= MAX_EVENTS_PER_READ
        seen.extend(seq for seq, _ in page)
    store.close()
    assert seen == list(range(1, total + 1))


@pytest.mark.anyio
async def test_stop_commits_what_was_queued_then_refuses(backend: Backend) -> None:
    store = backend.open()
    results: list[str] = []

    async def commit(b: Batch) -> None:
        await store.commit(b)
        results.append(b.combat_id)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(commit, batch(f"c{i}", 1, create=True))
        await anyio.wait_all_tasks_blocked()  # all 20 queued, none committed yet
        await store.stop()  # not running yet: returns at once, and run() drains the queue
        await store.run()
    with pytest.raises(StoreError) as e:
        await store.commit(batch("late", 1, create=True))
    assert e.value.code == "store_failed"
    assert len(loaded(store)) == len(results) == 20
    store.close()


@pytest.mark.anyio
async def test_a_cancelled_committer_fails_the_queued_batches(backend: Backend) -> None:
    store = backend.open()
    codes: list[str] = []

    async def commit(b: Batch) -> None:
        try:
            await store.commit(b)
        except StoreError as e:
            codes.append(e.code)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(commit, batch(f"c{i}", 1, create=True))
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.run()
    store.close()
    assert codes == ["store_failed"] * 5


def test_unencodable_data_is_refused_before_it_is_queued(backend: Backend) -> None:
    store = backend.open()
    with pytest.raises(TypeError):
        anyio.run(store.commit, Batch("c1", 1, ({"x": object()},), "marvel", None, None, 1.0))
    store.close()


@pytest.mark.anyio
async def test_load_starts_after_the_snapshot_and_an_unreadable_one_is_passed_over(
    backend: Backend,
) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(batch("snap", 1, 4, create=True, at=1.0))
        await store.commit(batch("broken", 1, 2, create=True, at=2.0))
    store.close()
    snapshot = "INSERT INTO {t}snapshots (combat_id, seq, body) VALUES (?, ?, ?)"
    backend.execute(snapshot, "snap", 2, msgpack.packb({"round": 2}))
    backend.execute(snapshot, "broken", 1, b"\xc1")

    store = backend.open()
    snap, broken = loaded(store)
    assert snap.snapshot == (2, {"round": 2})
    assert logged(store, snap) == [(3, event(3)), (4, event(4))]
    assert list(store.replay("snap", 0)) == [(n, event(n)) for n in range(1, 5)]
    assert broken.quarantined is None
    assert (broken.snapshot, logged(store, broken)) == (None, [(1, event(1)), (2, event(2))])
    store.close()
    [warning] = broken.warnings
    assert "snapshot at seq 1 is unreadable" in warning


@pytest.mark.anyio
async def test_a_gap_before_the_snapshot_quarantines_an_unreadable_event_is_found_when_read(
    backend: Backend,
) -> None:
    store = backend.open()
    async with running(store):
        for n, combat in enumerate(("unreadable", "gap", "short")):
            await store.commit(batch(combat, 1, 5, create=True, at=float(n)))
    store.close()
    for combat in ("unreadable", "gap", "short"):
        backend.execute(
            "INSERT INTO {t}snapshots (combat_id, seq, body) VALUES (?, 4, ?)",
            combat,
            msgpack.packb({}),
        )
    backend.execute("DELETE FROM {t}events WHERE combat_id = 'gap' AND seq = 2")
    backend.execute("DELETE FROM {t}events WHERE combat_id = 'short' AND seq >= 3")
    backend.corrupt("unreadable", 1)

    store = backend.open()
    unreadable, gap, short = loaded(store)
    # Loading reads no body before the snapshot: the rows are counted. Reading one (history)
    # finds it unreadable.
    assert (unreadable.quarantined, logged(store, unreadable)) == (None, [(5, event(5))])
    with pytest.raises(StoreError) as unread:
        await store.events_after("unreadable", 0, 10)
    assert "event 1 is unreadable" in unread.value.message
    store.close()
    assert gap.quarantined == "seq 2 is missing (next stored is 3)"
    assert short.quarantined == "seq 3 is missing (the snapshot is at seq 4)"


@pytest.mark.anyio
async def test_a_combats_table_is_kept_and_read_back(backend: Backend) -> None:
    store = backend.open()
    async with running(store):
        await store.commit(dataclasses.replace(batch("t1/c1", 1, create=True), table="t1"))
        await store.commit(batch("c2", 1, create=True))  # the default table's: not listed
    store.close()
    store = backend.open()
    assert store.memberships() == {"t1/c1": "t1"}
    store.close()
