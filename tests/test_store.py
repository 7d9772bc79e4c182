"""The SQLite store's own behaviour, on a real SQLite file: its data directory, lock, schema
version, WAL under a quota, and the memory and filter of requests (what every store does is in
tests/test_store_port.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import pytest
from structlog.testing import capture_logs

from test_store_port import batch, event, running
from turnkeeper import store as store_module
from turnkeeper.store import DB_FILE, LoadedCombat, Store, StoreError


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def reopen(data_dir: Path) -> Store:
    return Store.open(data_dir)


def loaded(store: Store) -> list[LoadedCombat]:
    """Every combat in creation order, as start-up finds each (``Hub.recover`` reads the
    summaries' list of combats, then loads them one at a time)."""
    return [store.load_one(combat_id) for combat_id, _ in store.summaries()]


def logged(store: Store, combat: LoadedCombat) -> list[tuple[int, dict[str, Any]]]:
    """The events a rebuild of ``combat`` replays: those after its snapshot."""
    return list(
        store.replay(combat.combat_id, 0 if combat.snapshot is None else combat.snapshot[0])
    )


def test_the_data_directory_is_created_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "data"
    Store.open(data_dir).close()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(data_dir.parent.stat().st_mode) == 0o700  # created by the daemon too
    assert (data_dir / DB_FILE).exists()
    with sqlite3.connect(data_dir / DB_FILE) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (4,)


def test_one_store_per_data_directory_and_the_refusal_names_the_holder(tmp_path: Path) -> None:
    first = Store.open(tmp_path)
    with pytest.raises(StoreError) as refused:
        Store.open(tmp_path)
    assert refused.value.code == "store_failed"
    assert str(tmp_path) in refused.value.message
    assert f"pid {os.getpid()}" in refused.value.message
    first.close()
    Store.open(tmp_path).close()  # closing releases it
    assert stat.S_IMODE((tmp_path / DB_FILE).stat().st_mode) == 0o600


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    with pytest.raises(StoreError) as e:
        Store.open(tmp_path)
    assert e.value.code == "store_failed"
    assert "schema version 99" in e.value.message


SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value NOT NULL);
CREATE TABLE combats (
    combat_id TEXT PRIMARY KEY,
    ruleset TEXT NOT NULL,
    created_at REAL NOT NULL,
    table_id TEXT NOT NULL DEFAULT 'default'
);
CREATE TABLE events (
    combat_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (combat_id, seq)
) WITHOUT ROWID;
CREATE TABLE requests (
    principal TEXT NOT NULL,
    request_id TEXT NOT NULL,
    combat_id TEXT NOT NULL,
    response BLOB NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (principal, request_id)
);
CREATE INDEX requests_at ON requests (at);
CREATE INDEX requests_principal_at ON requests (principal, at);
CREATE TABLE snapshots (combat_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE summaries (combat_id TEXT PRIMARY KEY, body BLOB NOT NULL);
INSERT INTO meta VALUES ('schema_version', 2);
"""
"""The schema the daemon wrote at version 2, before the committer wrote fewer B-trees."""


def version_2_data_dir(data_dir: Path) -> None:
    """A data directory as the daemon at schema version 2 left it: combat ``c1`` of two
    events, a request of alice's remembered and its summary."""
    data_dir.mkdir(mode=0o700)
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db, db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA_2)
        db.execute("INSERT INTO combats VALUES ('c1', 'marvel', 1.0, 'default')")
        for seq in (1, 2):
            db.execute("INSERT INTO events VALUES ('c1', ?, ?)", (seq, msgpack.packb({"n": seq})))
        db.execute(
            "INSERT INTO requests VALUES ('alice', 'r1', 'c1', ?, 1000.0)",
            (msgpack.packb({"seq": 2}),),
        )
        db.execute("INSERT INTO summaries VALUES ('c1', ?)", (msgpack.packb({"seq": 2}),))
    (data_dir / DB_FILE).chmod(0o600)


def schema(data_dir: Path) -> dict[str, Any]:
    """The database's version, its indexes and how its summaries table is declared."""
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db:
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        indexes = {
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        (summaries,) = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'summaries'"
        ).fetchone()
    return {"version": version, "indexes": indexes, "summaries": summaries}


@pytest.mark.anyio
async def test_a_version_2_database_is_upgraded_in_place(tmp_path: Path) -> None:
    version_2_data_dir(tmp_path / "data")
    with capture_logs() as logs:
        store = Store.open(tmp_path / "data")
    assert [(e["event"], e["schema_from"], e["schema_to"]) for e in logs] == [
        ("store_migrated", 2, 4)
    ]
    found = schema(tmp_path / "data")
    assert found["version"] == 4
    assert "requests_at" not in found["indexes"]
    # No unique index on the request id any more: the old row is found by the new index.
    assert "sqlite_autoindex_requests_1" not in found["indexes"]
    assert indexed_requests(tmp_path / "data") == [("alice", "r1", 1)]
    assert "recent_events_seq" in found["indexes"]
    assert "WITHOUT ROWID" in found["summaries"]
    async with running(store):
        # What the old version stored is all there: the summary, the log, the request id.
        assert store.summaries() == [("c1", {"seq": 2})]
        assert [seq for seq, _ in logged(store, store.load_one("c1"))] == [1, 2]
        assert await store.lookup_request("alice", "r1") == ("c1", {"seq": 2})
        await store.commit(dataclasses.replace(batch("c1", 3), summary={"seq": 3}))
    store.close()
    store = reopen(tmp_path / "data")
    assert store.summaries() == [("c1", {"seq": 3})]
    assert store.load_one("c1").last == 3
    store.close()


def indexed_requests(data_dir: Path) -> list[tuple[str, str, int]]:
    """The rows of ``request_keys``: (principal, request id, row of ``requests``)."""
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db:
        return db.execute("SELECT principal, request_id, row FROM request_keys").fetchall()


def test_a_migration_that_fails_leaves_the_old_version_whole(tmp_path: Path) -> None:
    version_2_data_dir(tmp_path / "data")
    with closing(sqlite3.connect(tmp_path / "data" / DB_FILE)) as db, db:
        db.execute("CREATE TABLE summaries_3 (x)")  # in the migration's way
    with pytest.raises(StoreError) as refused:
        Store.open(tmp_path / "data")
    assert refused.value.code == "store_failed"
    assert "summaries_3" in refused.value.message
    found = schema(tmp_path / "data")
    assert found["version"] == 2
    assert "requests_at" in found["indexes"]  # dropped in the same transaction, so kept
    assert "WITHOUT ROWID" not in found["summaries"]
    with closing(sqlite3.connect(tmp_path / "data" / DB_FILE)) as db:
        assert db.execute("SELECT count(*) FROM summaries").fetchone() == (1,)


@pytest.mark.anyio
async def test_a_database_over_its_share_of_a_new_quota_is_named_at_start_up(
    tmp_path: Path,
) -> None:
    """An upgrade: the quota used to be the database's alone; now its WAL takes a share. A
    database already past the rest is full from the start, and the log says so and what to do."""
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, 200, create=True, pad="x" * 4000))
    store.close()
    # Packed, as an older daemon left it: the recent events moved at the stop left pages free,
    # which a commit would take before it needs a new one.
    with closing(sqlite3.connect(tmp_path / DB_FILE)) as db:
        db.execute("VACUUM")
    pages = sqlite3.connect(tmp_path / DB_FILE).execute("PRAGMA page_count").fetchone()[0]
    quota = pages + pages // 8  # holds the database, but not in three quarters of it
    with capture_logs() as logs:
        store = Store.open(tmp_path, max_pages=quota)
    [warning] = [e for e in logs if e["event"] == "store_over_quota"]
    assert warning["database_mib"] == round(pages * 4096 / 2**20, 2)
    assert warning["quota_mib"] == round(quota * 4096 / 2**20, 2)
    assert "raise --max-db-mib to at least" in warning["advice"]
    async with running(store):
        with pytest.raises(StoreError) as full:
            await store.commit(batch("c1", 201, pad="x" * 4000))
    store.close()
    assert full.value.code == "store_full"
    # The advice is enough: at the quota it names, no warning, and commits fit.
    needed = int(warning["advice"].rsplit(" ", 1)[1])
    with capture_logs() as logs:
        store = Store.open(tmp_path, max_pages=needed * 256)
    assert [e for e in logs if e["event"] == "store_over_quota"] == []
    async with running(store):
        await store.commit(batch("c1", 201, pad="x" * 4000))
    store.close()


@pytest.mark.anyio
async def test_the_quota_holds_the_wal_too_and_a_wal_that_cannot_shrink_refuses_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 50)  # a held WAL is found at once
    quota = 400
    store = Store.open(tmp_path, max_pages=quota)
    wal = tmp_path / (DB_FILE + "-wal")
    share = quota // store_module.WAL_SHARE * 4096
    reader = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        # An open read transaction: no checkpoint can go past it, so the WAL cannot shrink.
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchall()
        refused: StoreError | None = None
        for seq in range(2, quota):
            try:
                await store.commit(batch("c1", seq, pad="x" * 8000))
            except StoreError as e:
                refused = e
                break
            assert wal.stat().st_size <= share
        assert refused is not None
        assert refused.code == "store_full"
        assert "write-ahead log" in refused.message
        reader.execute("COMMIT")
        await store.commit(batch("c1", seq))  # let go of, the WAL is checkpointed: room again
        assert wal.stat().st_size <= share
    [combat] = loaded(store)
    assert [s for s, _ in logged(store, combat)] == list(range(1, seq + 1))
    store.close()
    reader.close()


@pytest.mark.anyio
async def test_without_a_quota_a_reader_holding_the_wal_keeps_no_commit_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An online backup or an operator's ``sqlite3`` shell on an older snapshot keeps the WAL
    from being truncated past ``WAL_MAX_BYTES``: without a quota that is not waited for (the
    busy timeout, at every group while the reader reads), the WAL only grows meanwhile."""
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 3000)
    monkeypatch.setattr(store_module, "WAL_MAX_BYTES", 64 * 1024)
    store = Store.open(tmp_path)
    reader = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchall()
        started = time.monotonic()
        for seq in range(2, 8):  # each leaves the WAL over its bound: a trim after each
            await store.commit(batch("c1", seq, pad="x" * 16000))
        # Waiting for the reader would take the busy timeout per trim (15 s and more).
        assert time.monotonic() - started < 3
        reader.execute("COMMIT")
    [combat] = loaded(store)
    assert [s for s, _ in logged(store, combat)] == list(range(1, 8))
    store.close()
    reader.close()


@pytest.mark.anyio
async def test_the_wal_is_copied_beside_the_commits_and_restarted_once_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No commit checkpoints (SQLite's own checkpoints are off): the checkpointer copies the WAL
    from its own connection, and once it has copied a long one, the committer starts it again
    from its start when no batch is queued, so the file stops growing under steady writes."""
    monkeypatch.setattr(store_module, "CHECKPOINT_SECONDS", 1e6)  # one round, at the first commit
    monkeypatch.setattr(store_module, "WAL_RESTART_BYTES", 64 * 1024)
    wal = tmp_path / (DB_FILE + "-wal")
    store = Store.open(tmp_path)
    assert store._writer.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        for seq in range(2, 40):
            await store.commit(batch("c1", seq, pad="x" * 8000))
        grown = wal.stat().st_size
        assert grown > 38 * 8000  # nothing copied back in a commit
        await anyio.to_thread.run_sync(store._checkpointer.round)
        assert store._checkpointer.caught_up
        for seq in range(40, 60):  # half as many frames as before the restart
            await store.commit(batch("c1", seq, pad="x" * 8000))
        assert not store._checkpointer.caught_up
        assert wal.stat().st_size == grown  # written again from its start, not grown
    [combat] = loaded(store)
    assert [s for s, _ in logged(store, combat)] == list(range(1, 60))
    store.close()


@pytest.mark.anyio
async def test_a_commit_cancelled_while_it_waits_learns_its_outcome_then_is_cancelled(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path)
    learned: list[str] = []
    release = threading.Event()
    write = store._write

    def slow(group: Any) -> None:
        release.wait(10)
        write(group)

    store._write = slow  # type: ignore[method-assign]

    async def commit(scope: anyio.CancelScope) -> None:
        with scope:
            await store.commit(batch("c1", 1, create=True))
            learned.append("committed")  # before the cancellation lands, as after a shield
            await anyio.sleep(10)
            learned.append("not cancelled")

    async with running(store), anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        tg.start_soon(commit, scope)
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
        await anyio.sleep(0.05)
        assert learned == []  # still waiting for the committer, whose write goes on
        release.set()
    assert learned == ["committed"]
    assert scope.cancelled_caught
    assert [c.combat_id for c in loaded(store)] == ["c1"]
    store.close()


@pytest.mark.anyio
async def test_a_commit_cancelled_by_plain_asyncio_learns_its_outcome_then_is_cancelled(
    tmp_path: Path,
) -> None:
    """As under a cancel scope, but cancelled by ``Task.cancel`` and by ``asyncio.timeout``,
    which ask once and never again: the cancellation still lands at the task's next wait,
    counted once, so the timeout still tells itself from other cancellations."""
    store = Store.open(tmp_path)
    release = threading.Event()
    write = store._write

    def slow(group: Any) -> None:
        release.wait(10)
        write(group)

    store._write = slow  # type: ignore[method-assign]
    learned: list[str] = []

    async def cancelled() -> None:
        await store.commit(batch("c1", 1, create=True))
        learned.append("committed")
        await asyncio.sleep(1)
        learned.append("not cancelled")

    async def timed_out() -> None:
        try:
            async with asyncio.timeout(0.05):
                await store.commit(batch("c2", 1, create=True))
                learned.append("committed")
                await asyncio.sleep(1)
                learned.append("not cancelled")
        except TimeoutError:
            learned.append("timed out")

    with anyio.fail_after(10):
        async with running(store):
            task = asyncio.get_running_loop().create_task(cancelled())
            await anyio.wait_all_tasks_blocked()
            task.cancel()
            await anyio.sleep(0.05)
            assert learned == []  # still waiting for the committer, whose write goes on
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert learned == ["committed"]
            release.clear()
            timing = asyncio.get_running_loop().create_task(timed_out())
            await anyio.sleep(0.1)  # past the timeout, the write still held
            release.set()
            await timing
            assert learned == ["committed", "committed", "timed out"]
    assert [c.combat_id for c in loaded(store)] == ["c1", "c2"]
    store.close()


def _held_writes(store: Store) -> tuple[threading.Event, list[list[str]]]:
    """Hold each of the store's transactions until the event is set, and list the combats of
    each group as it is written."""
    release = threading.Event()
    write = store._write
    transactions: list[list[str]] = []

    def held(group: Any) -> None:
        release.wait(10)
        transactions.append([pending.batch.combat_id for pending in group])
        write(group)

    store._write = held  # type: ignore[method-assign]
    return release, transactions


@pytest.mark.anyio
async def test_commits_waiting_for_room_in_a_full_queue_keep_their_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue is full and a commit waits for room; a newcomer becomes runnable in the very
    turn the committer makes room, ahead of the waiter's wake-up. The slot is the waiter's: the
    newcomer waits behind it, however the loop orders their steps."""
    monkeypatch.setattr(store_module, "COMMIT_QUEUE", 2)
    store = Store.open(tmp_path)
    release = threading.Event()
    write = store._write

    def slow(group: Any) -> None:
        release.wait(10)
        write(group)

    store._write = slow  # type: ignore[method-assign]
    committed: list[str] = []

    async def commit(name: str) -> None:
        await store.commit(batch(name, 1, create=True))
        committed.append(name)

    make_room = store._make_room
    newcomer: list[asyncio.Task[None]] = []

    def room_made_as_a_newcomer_arrives() -> None:
        if not newcomer:
            newcomer.append(asyncio.get_running_loop().create_task(commit("newcomer")))
        make_room()

    async with running(store), anyio.create_task_group() as tg:
        tg.start_soon(commit, "a")
        await anyio.wait_all_tasks_blocked()  # taken by the committer, its write held
        tg.start_soon(commit, "b")
        tg.start_soon(commit, "c")
        await anyio.wait_all_tasks_blocked()  # the queue is full
        tg.start_soon(commit, "waiter")
        await anyio.wait_all_tasks_blocked()  # waiting for room
        monkeypatch.setattr(store, "_make_room", room_made_as_a_newcomer_arrives)
        release.set()
        with anyio.fail_after(10):
            while len(committed) < 5:
                await anyio.sleep(0.01)
    assert committed == ["a", "b", "c", "waiter", "newcomer"]
    store.close()


@pytest.mark.anyio
async def test_a_commit_cancelled_as_it_is_handed_room_passes_the_room_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three commits wait for room in a full queue of two; the committer makes room for two of
    them, and the first is cancelled before it wakes. Its slot goes to the third at once, which
    commits beside the second, and the cancelled one is not stored."""
    monkeypatch.setattr(store_module, "COMMIT_QUEUE", 2)
    store = Store.open(tmp_path)
    release, transactions = _held_writes(store)
    committed: list[str] = []

    async def commit(name: str) -> None:
        await store.commit(batch(name, 1, create=True))
        committed.append(name)

    make_room = store._make_room
    first: list[asyncio.Task[None]] = []

    def room_made_as_the_first_is_cancelled() -> None:
        make_room()
        # Handed its slot, not awake yet. A cancel scope would wait for it to wake (anyio
        # cancels no task whose future is done): a task's own ``cancel`` does not.
        first[0].cancel()

    with anyio.fail_after(10):
        async with running(store), anyio.create_task_group() as tg:
            tg.start_soon(commit, "a")
            await anyio.wait_all_tasks_blocked()  # taken by the committer, its write held
            tg.start_soon(commit, "b")
            tg.start_soon(commit, "c")
            await anyio.wait_all_tasks_blocked()  # the queue is full
            first.append(asyncio.get_running_loop().create_task(commit("first")))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(commit, "second")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(commit, "third")
            await anyio.wait_all_tasks_blocked()
            monkeypatch.setattr(store, "_make_room", room_made_as_the_first_is_cancelled)
            release.set()
            while len(committed) < 4:
                await anyio.sleep(0.01)
    assert first[0].cancelled()
    assert transactions == [["a"], ["b", "c"], ["second", "third"]]
    assert [c.combat_id for c in loaded(store)] == ["a", "b", "c", "second", "third"]
    store.close()


@pytest.mark.anyio
async def test_batches_queued_behind_a_transaction_gather_into_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two batches queue while a transaction is written; once it ends the committer waits for
    more (the window is made far longer than the test may take), and the next two to arrive
    join them: one transaction of four, started as soon as the fourth is queued."""
    monkeypatch.setattr(store_module, "GATHER_BATCHES", 4)
    monkeypatch.setattr(store_module, "GATHER_SECONDS", 60.0)
    store = Store.open(tmp_path)
    release, transactions = _held_writes(store)
    committed: list[str] = []

    async def commit(name: str) -> None:
        await store.commit(batch(name, 1, create=True))
        committed.append(name)

    with anyio.fail_after(10):
        async with running(store), anyio.create_task_group() as tg:
            tg.start_soon(commit, "a")
            await anyio.wait_all_tasks_blocked()  # taken by the committer, its write held
            tg.start_soon(commit, "b")
            tg.start_soon(commit, "c")
            await anyio.wait_all_tasks_blocked()
            release.set()
            while committed != ["a"]:
                await anyio.sleep(0.01)
            await anyio.sleep(0.05)  # b and c stay queued: the group waits for more
            assert committed == ["a"]
            tg.start_soon(commit, "d")
            tg.start_soon(commit, "e")
    assert transactions == [["a"], ["b", "c", "d", "e"]]
    assert sorted(committed) == ["a", "b", "c", "d", "e"]
    store.close()


@pytest.mark.anyio
async def test_a_group_larger_than_one_insert_is_written_whole_and_in_its_order(
    tmp_path: Path,
) -> None:
    """One transaction of more batches than one statement inserts (``ROWS_PER_INSERT``): its
    rows go in statements of several sizes, and every event, remembered request and summary
    is stored, the requests in the group's order (the order the age prune walks)."""
    size = store_module.ROWS_PER_INSERT + 11  # 75: statements of 64, 8, 2 and 1 rows
    store = Store.open(tmp_path)
    names = [f"c{i}" for i in range(size)]
    async with running(store):
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(store.commit, batch(name, 1, create=True))
        before = store.transactions
        async with anyio.create_task_group() as tg:
            for i, name in enumerate(names):
                b = batch(name, 2, 3, request=("p", f"r{i}"), response={"n": i}, at=2000.0 + i)
                tg.start_soon(store.commit, dataclasses.replace(b, summary={"last": 4}))
        assert store.transactions == before + 1
    with closing(sqlite3.connect(tmp_path / DB_FILE)) as db:
        stored = [r for (r,) in db.execute("SELECT request_id FROM requests ORDER BY id")]
    found = {c.combat_id: logged(store, c) for c in loaded(store)}
    summaries = dict(store.summaries())
    answers = [await store.lookup_request("p", f"r{i}") for i in range(size)]
    store.close()
    assert stored == [f"r{i}" for i in range(size)]
    assert found == {name: [(n, event(n)) for n in range(1, 5)] for name in names}
    assert summaries == {name: {"last": 4} for name in names}
    assert answers == [(name, {"n": i}) for i, name in enumerate(names)]


@pytest.mark.anyio
@pytest.mark.parametrize("bad", [0, 40, 63, 64, 74])
async def test_a_conflict_inside_a_many_row_insert_refuses_its_batch_alone(
    tmp_path: Path, bad: int
) -> None:
    """A batch whose seq was taken behind the store's back, anywhere in a group written in
    statements of many rows (the first row, inside the 64-row statement, its last row, the next
    statement's first, the group's last): the failed statement leaves no row, the group is
    written again a batch at a time in the same transaction, and only that batch is refused."""
    size = store_module.ROWS_PER_INSERT + 11  # 75: statements of 64, 8, 2 and 1 rows
    store = Store.open(tmp_path)
    names = [f"c{i}" for i in range(size)]
    refused: dict[str, str] = {}
    async with running(store):
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(store.commit, batch(name, 1, create=True))
        with closing(sqlite3.connect(tmp_path / DB_FILE)) as db:
            db.execute(
                "INSERT INTO recent_events (combat_id, seq, body) VALUES (?, 2, x'00')",
                (names[bad],),
            )
            db.commit()
        before = store.transactions

        async def one(i: int, name: str) -> None:
            b = batch(name, 2, 3, request=("p", f"r{i}"), response={"n": i}, at=2000.0 + i)
            try:
                await store.commit(b)
            except StoreError as e:
                refused[name] = e.code

        async with anyio.create_task_group() as tg:
            for i, name in enumerate(names):
                tg.start_soon(one, i, name)
        assert store.transactions == before + 1
    with closing(sqlite3.connect(tmp_path / DB_FILE)) as db:
        stored = [r for (r,) in db.execute("SELECT request_id FROM requests ORDER BY id")]
        counts = dict(
            db.execute(
                "SELECT combat_id, count(*) FROM ("
                " SELECT combat_id FROM recent_events UNION ALL SELECT combat_id FROM events"
                ") GROUP BY combat_id"
            ).fetchall()
        )
    store.close()
    assert refused == {names[bad]: "conflict"}
    assert stored == [f"r{i}" for i in range(size) if i != bad]
    assert counts == {name: 2 if i == bad else 4 for i, name in enumerate(names)}


@pytest.mark.anyio
async def test_a_lone_batch_waits_at_most_the_window_and_a_lone_client_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch queued behind a transaction, with none arriving after it, is written once the
    window passes; a client that waits for each answer before its next command finds the queue
    empty every time, and is never held (the window is made far longer than the test may take:
    a held command would time it out)."""
    monkeypatch.setattr(store_module, "GATHER_SECONDS", 0.05)
    store = Store.open(tmp_path)
    release, transactions = _held_writes(store)
    with anyio.fail_after(10):
        async with running(store):
            async with anyio.create_task_group() as tg:
                tg.start_soon(store.commit, batch("a", 1, create=True))
                await anyio.wait_all_tasks_blocked()  # taken by the committer, its write held
                tg.start_soon(store.commit, batch("b", 1, create=True))
                await anyio.wait_all_tasks_blocked()
                release.set()
            assert transactions == [["a"], ["b"]]
            monkeypatch.setattr(store_module, "GATHER_SECONDS", 60.0)
            for seq in range(1, 6):
                await store.commit(batch("lone", seq, create=seq == 1))
    assert transactions[2:] == [["lone"]] * 5
    store.close()


@pytest.mark.anyio
async def test_requests_are_forgotten_by_age_and_past_the_cap_per_principal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "PRUNE_EVERY_COMMITS", 1)
    monkeypatch.setattr(store_module, "MAX_REMEMBERED_REQUESTS", 2)
    day = store_module.REQUEST_MEMORY_SECONDS
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("old", "r"), at=1.0))
        for seq in range(2, 6):
            await store.commit(batch("c1", seq, request=("busy", f"r{seq}"), at=day + seq))
    assert await store.lookup_request("old", "r") is None
    assert [await store.lookup_request("busy", f"r{seq}") is not None for seq in range(2, 6)] == [
        False,
        False,
        True,
        True,
    ]
    store.close()


def remembered(data_dir: Path) -> dict[str, list[str]]:
    """Each principal's request ids in the database, oldest first."""
    found: dict[str, list[str]] = {}
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db:
        for principal, request_id in db.execute(
            "SELECT principal, request_id FROM requests ORDER BY rowid"
        ):
            found.setdefault(principal, []).append(request_id)
    return found


@pytest.mark.anyio
async def test_the_cap_per_principal_holds_across_prunes_and_a_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committer counts a principal's rows once, then adds what it writes: the newest
    three stay, whoever else writes, and after a reopen (counted again) too."""
    monkeypatch.setattr(store_module, "PRUNE_EVERY_COMMITS", 2)
    monkeypatch.setattr(store_module, "MAX_REMEMBERED_REQUESTS", 3)
    seq = 1
    for round in range(2):
        store = Store.open(tmp_path)
        async with running(store):
            for n in range(7):
                await store.commit(
                    batch(
                        "c1",
                        seq,
                        create=seq == 1,
                        request=("alice", f"a{round}{n}"),
                        at=1000.0 + seq,
                    )
                )
                if n % 3 == 0:
                    await store.commit(
                        batch("c1", seq + 1, request=("bob", f"b{round}{n}"), at=1001.0 + seq)
                    )
                    seq += 1
                seq += 1
            # The last commits may follow the last prune: one more, of a request of no one.
            await store.commit(batch("c1", seq, at=1000.0 + seq))
            await store.commit(batch("c1", seq + 1, at=1001.0 + seq))
            seq += 2
        store.close()
        assert remembered(tmp_path) == {
            "alice": [f"a{round}{n}" for n in (4, 5, 6)],
            "bob": [f"b{round}{n}" for n in (0, 3, 6)],
        }


@pytest.mark.anyio
async def test_a_crashed_committer_still_answers_the_batch_it_took(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    codes: list[str] = []

    def crash(group: object) -> None:
        raise RuntimeError("boom")

    store._write = crash  # type: ignore[method-assign]

    async def commit() -> None:
        try:
            await store.commit(batch("c1", 1, create=True))
        except StoreError as e:
            codes.append(e.code)

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="boom")):
        async with anyio.create_task_group() as tg:
            await tg.start(store.run)
            tg.start_soon(commit)
    store.close()
    assert codes == ["store_failed"]


def forget_all_requests(data_dir: Path) -> None:
    """Delete every remembered request from the database, behind the store's back: what is
    still answered then comes from its memory."""
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db, db:
        db.execute("DELETE FROM requests")


@pytest.mark.anyio
async def test_a_retry_is_answered_from_memory_newest_kept_per_principal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAX_RECENT_PER_PRINCIPAL", 2)
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), response=1))
        for seq in range(2, 5):
            await store.commit(batch("c1", seq, request=("alice", f"r{seq}"), response=seq))
        await store.commit(batch("c1", 5, request=("bob", "r1"), response=5))
        # Past the memory, the database answers (in a worker thread).
        assert await store.lookup_request("alice", "r1") == ("c1", 1)
        forget_all_requests(tmp_path)
        assert [await store.lookup_request("alice", f"r{n}") for n in range(1, 5)] == [
            None,
            None,
            ("c1", 3),
            ("c1", 4),
        ]
        assert await store.lookup_request("bob", "r1") == ("c1", 5)  # alice's took none of it
    store.close()


@pytest.mark.anyio
async def test_the_recent_answers_are_bounded_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(msgpack.packb({"result": "x" * 100})) + store_module.RECENT_ENTRY_BYTES
    monkeypatch.setattr(store_module, "MAX_RECENT_BYTES", 3 * size)
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        for seq in range(2, 8):
            principal = ("alice", "bob", "carol")[seq % 3]
            request = (principal, f"r{seq}")
            await store.commit(batch("c1", seq, request=request, response={"result": "x" * 100}))
        forget_all_requests(tmp_path)
        answered = [
            seq
            for seq in range(2, 8)
            if await store.lookup_request(("alice", "bob", "carol")[seq % 3], f"r{seq}")
        ]
    store.close()
    assert answered == [5, 6, 7]


@pytest.mark.anyio
async def test_a_request_id_never_stored_is_ruled_out_without_reading_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path)
    read: list[tuple[str, str]] = []
    stored_request = store._stored_request

    def counted(principal: str, request_id: str) -> Any:
        read.append((principal, request_id))
        return stored_request(principal, request_id)

    monkeypatch.setattr(store, "_stored_request", counted)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), response=1))
        assert [await store.lookup_request("alice", f"new-{n}") for n in range(200)] == [None] * 200
        assert await store.lookup_request("alice", "r1") == ("c1", 1)  # from memory
    store.close()
    # A filter may say "maybe" for an id never stored (rarely): the database then says no.
    assert len(read) <= 2


@pytest.mark.anyio
async def test_a_request_remembered_before_a_restart_is_found_once_the_filter_is_built(
    tmp_path: Path,
) -> None:
    """After a restart memory is empty: the filter, built from the database before the first
    transaction, sends a retry of an older request to the database, which answers it."""
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), response="one"))
    store.close()

    store = reopen(tmp_path)
    async with running(store):
        assert await store.lookup_request("alice", "r1") == ("c1", "one")  # no filter yet
        await store.commit(batch("c1", 2, request=("alice", "r2"), response="two"))
        assert await store.lookup_request("alice", "r1") == ("c1", "one")
        assert await store.lookup_request("alice", "r2") == ("c1", "two")
        assert await store.lookup_request("alice", "r3") is None
        with pytest.raises(StoreError) as again:
            await store.commit(batch("c1", 3, request=("alice", "r1"), response="again"))
    store.close()
    assert again.value.code == "conflict"


@pytest.mark.anyio
async def test_requests_indexed_many_at_a_time_are_found_and_refused_twice_indexed_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests are appended unindexed and indexed ``REQUEST_KEYS_EVERY`` at a time: one
    indexed or still waiting is answered from the database alike (no memory of recent answers
    here), refused a second time alike, and so after a reopen; a pruned one leaves the index."""
    monkeypatch.setattr(store_module, "REQUEST_KEYS_EVERY", 3)
    monkeypatch.setattr(store_module, "MAX_RECENT_PER_PRINCIPAL", 0)
    for opening in range(2):
        store = Store.open(tmp_path)
        async with running(store):
            if opening == 0:
                await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), at=1))
                for seq in range(2, 8):
                    await store.commit(
                        batch("c1", seq, request=("alice", f"r{seq}"), response=seq, at=seq)
                    )
            # Indexed in a transaction of their own once three wait and no batch is queued:
            # after the third commit and after the sixth; r7 waits, over the reopen too.
            indexed = [row for _, _, row in indexed_requests(tmp_path)]
            assert indexed == [1, 2, 3, 4, 5, 6]
            for seq in range(2, 8):
                assert await store.lookup_request("alice", f"r{seq}") == ("c1", seq)
            assert await store.lookup_request("bob", "r2") is None
            for taken in ("r2", "r7"):
                with pytest.raises(StoreError) as refused:
                    await store.commit(batch("c1", 8, request=("alice", taken)))
                assert refused.value.code == "conflict"
                assert f"request id {taken!r} of 'alice' is stored already" in str(refused.value)
        store.close()
    # The cap prunes the oldest rows and their keys.
    monkeypatch.setattr(store_module, "PRUNE_EVERY_COMMITS", 1)
    monkeypatch.setattr(store_module, "MAX_REMEMBERED_REQUESTS", 2)
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 8, request=("alice", "r8"), response=8, at=8))
        await store.commit(batch("c1", 9, at=9))  # written once the prune after r8's commit is done
        assert await store.lookup_request("alice", "r2") is None
        assert await store.lookup_request("alice", "r7") == ("c1", 7)
    store.close()
    assert remembered(tmp_path) == {"alice": ["r7", "r8"]}
    assert indexed_requests(tmp_path) == []  # r7 and r8 wait for their indexing


def event_tables(data_dir: Path) -> dict[str, list[int]]:
    """The seqs in each table of events."""
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db:
        return {
            table: [seq for (seq,) in db.execute(f"SELECT seq FROM {table} ORDER BY seq")]
            for table in ("events", "recent_events")
        }


@pytest.mark.anyio
async def test_recent_events_are_read_with_the_moved_ones_and_moved_many_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events are appended to ``recent_events`` and moved into ``events`` once their bodies
    reach ``EVENTS_MOVE_BYTES``: a log split across both is read, counted and continued as one,
    after a kill too (nothing moved at the end), and a clean stop moves them all."""
    size = len(msgpack.packb(batch("c1", 1).events[0], use_bin_type=True))  # each as long
    monkeypatch.setattr(store_module, "EVENTS_MOVE_BYTES", 3 * size)
    store = Store.open(tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await store.commit(batch("c1", 1, 2, create=True))
        # Three waiting, and no batch queued: moved in a transaction of their own.
        await store.commit(batch("c1", 3, 1))
        await store.commit(batch("c1", 4, 1))
        await store.commit(batch("c1", 5, 1))
        tg.cancel_scope.cancel()  # killed: no stop, nothing moved at the end
    store.close()
    assert event_tables(tmp_path) == {"events": [1, 2, 3], "recent_events": [4, 5]}

    store = reopen(tmp_path)
    [combat] = loaded(store)
    assert (combat.last, combat.quarantined) == (5, None)
    assert [seq for seq, _ in logged(store, combat)] == [1, 2, 3, 4, 5]
    async with running(store):
        assert [seq for seq, _ in await store.events_after("c1", 2, 10)] == [3, 4, 5]
        with pytest.raises(StoreError) as taken:  # its last seq is counted in both tables
            await store.commit(batch("c1", 5))
        assert taken.value.code == "conflict"
        await store.commit(batch("c1", 6))
    store.close()
    assert event_tables(tmp_path) == {"events": [1, 2, 3, 4, 5, 6], "recent_events": []}


@pytest.mark.anyio
async def test_a_snapshot_is_encoded_in_the_committers_thread_and_a_failing_one_left_out(
    tmp_path: Path,
) -> None:
    loop_thread = threading.get_ident()
    encoded_in: list[int] = []

    def snapshot() -> Any:
        encoded_in.append(threading.get_ident())
        return {"round": 3}

    def broken() -> Any:
        raise ValueError("cannot encode")

    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
        await store.commit(dataclasses.replace(batch("c1", 4), snapshot=snapshot))
        with capture_logs() as logs:
            await store.commit(dataclasses.replace(batch("c1", 5), snapshot=broken))
            await store.stop()  # the snapshot is encoded after the answer, by the stop at last
    [combat] = loaded(store)
    store.close()
    assert len(encoded_in) == 1
    assert loop_thread not in encoded_in
    assert [e["event"] for e in logs] == ["snapshot_not_encoded"]
    assert (combat.snapshot, combat.last) == ((4, {"round": 3}), 5)


@pytest.mark.anyio
async def test_an_answer_never_waits_for_its_snapshot(tmp_path: Path) -> None:
    """The snapshot of a batch is encoded and written after the batch's answer, in a
    transaction of its own: the commit has returned while the snapshot is still being made,
    and a later batch of the combat (whose snapshot is newer) leaves only its own."""
    started, release = threading.Event(), threading.Event()
    making: list[int] = []
    answered: list[int] = []

    def slow(seq: int) -> Any:
        making.append(seq)
        started.set()
        release.wait(10)
        return {"at": seq}

    async def commit(seq: int) -> None:
        await store.commit(dataclasses.replace(batch("c1", seq), snapshot=partial(slow, seq)))
        answered.append(seq)

    store = Store.open(tmp_path)
    async with running(store), anyio.create_task_group() as tg:
        await store.commit(batch("c1", 1, create=True))
        tg.start_soon(commit, 2)
        assert await anyio.to_thread.run_sync(started.wait, 10)
        await anyio.wait_all_tasks_blocked()
        answers_while_made = list(answered)
        tg.start_soon(commit, 3)  # queued behind the snapshot's transaction
        await anyio.wait_all_tasks_blocked()
        release.set()
    [combat] = loaded(store)
    store.close()
    assert answers_while_made == [2]
    assert (making, answered) == ([2, 3], [2, 3])
    assert (combat.snapshot, combat.last) == ((3, {"at": 3}), 3)


@pytest.mark.anyio
async def test_a_failing_move_aside_is_tried_again_after_the_next_commit_not_in_a_spin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work aside (here a move of recent events) failing, the commands still commit, and
    it is tried once per commit, never again and again while the queue is empty."""
    monkeypatch.setattr(store_module, "EVENTS_MOVE_BYTES", 1)

    def refused(self: Store) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_move_events", refused)
    store = Store.open(tmp_path)
    with capture_logs() as logs:
        async with running(store):
            await store.commit(batch("c1", 1, create=True))
            for seq in range(2, 5):
                await store.commit(batch("c1", seq))
    store.close()
    # Tried after each commit, and once more by the clean stop.
    assert [e["event"] for e in logs] == ["store_aside_failed"] * 4 + ["recent_events_not_moved"]
    assert event_tables(tmp_path) == {"events": [], "recent_events": [1, 2, 3, 4]}


KILLED_MID_SNAPSHOT = r"""
import dataclasses, sys, threading, anyio
sys.path.insert(0, sys.argv[2])
from test_store_port import batch
from turnkeeper.store import Store

def stuck():
    sys.stdout.write("making\n")
    sys.stdout.flush()
    threading.Event().wait()

async def main():
    store = Store.open(__import__("pathlib").Path(sys.argv[1]))
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await store.commit(batch("c1", 1, 2, create=True))
        await store.commit(dataclasses.replace(batch("c1", 3), snapshot=lambda: {"at": 3}))
        await store.stop()
    store.close()
    store = Store.open(__import__("pathlib").Path(sys.argv[1]))
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await store.commit(dataclasses.replace(batch("c1", 4, 2), snapshot=stuck))
        sys.stdout.write("answered\n")
        sys.stdout.flush()
        await anyio.sleep(60)

anyio.run(main)
"""


def test_a_kill_while_a_snapshot_is_made_leaves_the_previous_one(tmp_path: Path) -> None:
    """Killed (SIGKILL) after a batch's answer, while its snapshot is being made: the batch is
    in the log, and the combat's snapshot is the one before it."""
    script = tmp_path / "killed.py"
    script.write_text(KILLED_MID_SNAPSHOT)
    data = tmp_path / "data"
    with subprocess.Popen(
        [sys.executable, str(script), str(data), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        # A batch whose answer waited for its snapshot would never be answered: killed anyway.
        timer = threading.Timer(30, child.kill)
        timer.start()
        said = {child.stdout.readline().strip() for _ in range(2)}
        timer.cancel()
        child.kill()
        child.wait()
    assert said == {"answered", "making"}
    store = Store.open(data)
    [combat] = loaded(store)
    assert (combat.snapshot, combat.last, combat.quarantined) == ((3, {"at": 3}), 5, None)
    assert [seq for seq, _ in logged(store, combat)] == [4, 5]
    store.close()


@pytest.mark.anyio
async def test_the_filter_rebuilt_from_the_database_still_finds_every_stored_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "FILTER_REBUILD_KEYS", 2)
    monkeypatch.setattr(store_module, "MAX_RECENT_PER_PRINCIPAL", 1)  # memory holds the last
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        for seq in range(2, 10):
            await store.commit(batch("c1", seq, request=("alice", f"r{seq}"), response=seq))
        found = [await store.lookup_request("alice", f"r{seq}") for seq in range(2, 10)]
        assert await store.lookup_request("alice", "r10") is None
    store.close()
    assert found == [("c1", seq) for seq in range(2, 10)]


def test_the_filter_finds_every_id_it_added_and_rules_out_the_others() -> None:
    """``add`` (the committer's) and ``maybe`` (the event loop's) walk their probes each in its
    own way: an id added is a "maybe" and is known to ``add`` the next time; of ids never
    added, with a few thousand bits set among millions, none is."""
    known = store_module._Filter()
    added = [("alice", f"r{n}") for n in range(1000)]
    assert [known.add(key) for key in added] == [False] * 1000
    assert all(known.maybe(*key) for key in added)
    assert all(known.add(key) for key in added)
    assert not any(known.maybe("alice", f"other-{n}") for n in range(1000))


def test_the_committer_thread_outlives_a_loop_that_closed_while_it_wrote() -> None:
    # A job still running when its loop is gone cannot report to it; the thread must go on to
    # the next job (a store used again from a new loop), not die and leave that one waiting.
    import asyncio

    committer = store_module._CommitterThread()
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(10)
        return 1

    async def abandon() -> None:
        task = asyncio.ensure_future(committer.run(slow))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()

    asyncio.run(abandon())
    release.set()

    async def again() -> int:
        return await asyncio.wait_for(committer.run(lambda: 42), 10)

    try:
        assert asyncio.run(again()) == 42
    finally:
        committer.close()
        committer.join()
