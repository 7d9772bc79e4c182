"""The durable store, on a real SQLite file: what is committed survives a reopen, concurrent
commands share transactions, and a failed or refused batch never leaves a part behind."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sqlite3
import stat
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import pytest
from structlog.testing import capture_logs

from turnkeeper import store as store_module
from turnkeeper.store import DB_FILE, MAX_EVENTS_PER_READ, Batch, LoadedCombat, Store, StoreError


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
async def running(store: Store) -> AsyncIterator[Store]:
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        yield store
        await store.stop()


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


def corrupt(data_dir: Path, combat_id: str, seq: int) -> None:
    with sqlite3.connect(data_dir / DB_FILE) as db:
        db.execute(
            "UPDATE events SET body = ? WHERE combat_id = ? AND seq = ?",
            (b"\xc1garbage", combat_id, seq),
        )


@pytest.mark.anyio
async def test_committed_events_survive_a_reopen(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
        await store.commit(batch("c1", 4, 2))
    store.close()

    store = reopen(tmp_path / "data")
    [combat] = loaded(store)
    events = logged(store, combat)
    store.close()
    assert (combat.combat_id, combat.ruleset, combat.created_at) == ("c1", "marvel", 1000.0)
    assert events == [(n, event(n)) for n in range(1, 6)]
    assert (combat.snapshot, combat.last) == (None, 5)
    assert combat.warnings == []
    assert combat.quarantined is None


def test_the_data_directory_is_created_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "data"
    Store.open(data_dir).close()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(data_dir.parent.stat().st_mode) == 0o700  # created by the daemon too
    assert (data_dir / DB_FILE).exists()
    with sqlite3.connect(data_dir / DB_FILE) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (2,)


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


@pytest.mark.anyio
async def test_concurrent_commits_all_land_in_fewer_transactions(tmp_path: Path) -> None:
    combats = 200
    store = Store.open(tmp_path)
    async with running(store), anyio.create_task_group() as tg:
        for i in range(combats):
            tg.start_soon(store.commit, batch(f"c{i}", 1, 2, create=True))
    assert 1 <= store.transactions < combats
    found = loaded(store)
    assert sorted(c.combat_id for c in found) == sorted(f"c{i}" for i in range(combats))
    assert all(logged(store, c) == [(1, event(1)), (2, event(2))] for c in found)
    store.close()


@pytest.mark.anyio
async def test_a_duplicate_seq_is_a_conflict_for_its_own_batch_only(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    outcomes: dict[str, str] = {}

    async def commit(name: str, b: Batch) -> None:
        try:
            await store.commit(b)
            outcomes[name] = "ok"
        except StoreError as e:
            outcomes[name] = e.code

    async with running(store):
        await store.commit(batch("c1", 1, 2, create=True))
        before = store.transactions
        async with anyio.create_task_group() as tg:  # queued together: one transaction
            tg.start_soon(commit, "duplicate", batch("c1", 2))
            tg.start_soon(commit, "other", batch("c2", 1, create=True))
            tg.start_soon(commit, "gap", batch("c1", 5))
            tg.start_soon(commit, "unknown combat", batch("nowhere", 1))
            tg.start_soon(commit, "combat twice", batch("c1", 3, create=True))
        assert store.transactions == before + 1
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
async def test_a_remembered_request_answers_after_a_reopen(tmp_path: Path) -> None:
    response = {"result": [1, "two", None], "seq": 1}
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), response=response))
        with pytest.raises(StoreError) as e:  # the same request id twice
            await store.commit(batch("c1", 2, request=("alice", "r1"), response=response))
    store.close()
    assert e.value.code == "conflict"

    store = reopen(tmp_path)
    assert await store.lookup_request("alice", "r1") == ("c1", response)
    assert await store.lookup_request("bob", "r1") is None
    [combat] = loaded(store)
    assert logged(store, combat) == [(1, event(1))]
    store.close()


@pytest.mark.anyio
async def test_an_unreadable_last_event_fails_the_replay_and_keeps_its_seq(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
    store.close()
    corrupt(tmp_path, "c1", 3)

    store = reopen(tmp_path)
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
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone() == (3,)


@pytest.mark.anyio
async def test_garbage_or_a_gap_mid_log_is_found_in_that_combat_only(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("bad", 1, 3, create=True, at=1.0))
        await store.commit(batch("good", 1, 2, create=True, at=2.0))
        await store.commit(batch("gap", 1, 3, create=True, at=3.0))
    store.close()
    corrupt(tmp_path, "bad", 2)
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute("DELETE FROM events WHERE combat_id = 'gap' AND seq = 2")

    store = reopen(tmp_path)
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
async def test_a_full_disk_fails_the_whole_transaction_and_keeps_nothing(tmp_path: Path) -> None:
    Store.open(tmp_path).close()  # the schema's own pages, before the limit applies
    pages = sqlite3.connect(tmp_path / DB_FILE).execute("PRAGMA page_count").fetchone()[0]
    store = Store.open(tmp_path, max_pages=pages + 4)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        with pytest.raises(StoreError) as e:
            await store.commit(batch("c1", 2, 50, pad="x" * 2000))
        assert e.value.code == "store_full"
        await store.commit(batch("c1", 2))  # small enough: the store still works
    [combat] = loaded(store)
    assert logged(store, combat) == [(1, event(1)), (2, event(2))]
    store.close()


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
async def test_events_after_pages_through_the_log(tmp_path: Path) -> None:
    total = MAX_EVENTS_PER_READ + 50
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("c1", 1, total, create=True))
    assert store.events_after("c1", 0, 3) == [(1, event(1)), (2, event(2)), (3, event(3))]
    assert store.events_after("c1", total - 1, 10) == [(total, event(total))]
    assert store.events_after("c1", total, 10) == []
    assert store.events_after("c1", 0, 0) == []
    assert store.events_after("nowhere", 0, 10) == []
    seen: list[int] = []
    while page := store.events_after("c1", seen[-1] if seen else 0, total):
        assert len(page) <= MAX_EVENTS_PER_READ
        seen.extend(seq for seq, _ in page)
    store.close()
    assert seen == list(range(1, total + 1))


@pytest.mark.anyio
async def test_stop_commits_what_was_queued_then_refuses(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
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
async def test_a_cancelled_committer_fails_the_queued_batches(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
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
    release = threading.Event()
    write = store._write
    transactions: list[list[str]] = []

    def slow(group: Any) -> None:
        release.wait(10)
        transactions.append([pending.batch.combat_id for pending in group])
        write(group)

    store._write = slow  # type: ignore[method-assign]
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


def test_unencodable_data_is_refused_before_it_is_queued(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with pytest.raises(TypeError):
        anyio.run(store.commit, Batch("c1", 1, ({"x": object()},), "marvel", None, None, 1.0))
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


@pytest.mark.anyio
async def test_load_starts_after_the_snapshot_and_an_unreadable_one_is_passed_over(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path)
    async with running(store):
        await store.commit(batch("snap", 1, 4, create=True, at=1.0))
        await store.commit(batch("broken", 1, 2, create=True, at=2.0))
    store.close()
    with sqlite3.connect(tmp_path / DB_FILE) as db:  # no writer yet: the format is the lead's call
        db.execute("INSERT INTO snapshots VALUES ('snap', 2, ?)", (msgpack.packb({"round": 2}),))
        db.execute("INSERT INTO snapshots VALUES ('broken', 1, ?)", (b"\xc1",))

    store = reopen(tmp_path)
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
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path)
    async with running(store):
        for n, combat in enumerate(("unreadable", "gap", "short")):
            await store.commit(batch(combat, 1, 5, create=True, at=float(n)))
    store.close()
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        for combat in ("unreadable", "gap", "short"):
            db.execute("INSERT INTO snapshots VALUES (?, 4, ?)", (combat, msgpack.packb({})))
        db.execute("DELETE FROM events WHERE combat_id = 'gap' AND seq = 2")
        db.execute("DELETE FROM events WHERE combat_id = 'short' AND seq >= 3")
    corrupt(tmp_path, "unreadable", 1)

    store = reopen(tmp_path)
    unreadable, gap, short = loaded(store)
    # Loading reads no body before the snapshot: the rows are counted. Reading one (history)
    # finds it unreadable.
    assert (unreadable.quarantined, logged(store, unreadable)) == (None, [(5, event(5))])
    with pytest.raises(StoreError) as unread:
        store.events_after("unreadable", 0, 10)
    assert "event 1 is unreadable" in unread.value.message
    store.close()
    assert gap.quarantined == "seq 2 is missing (next stored is 3)"
    assert short.quarantined == "seq 3 is missing (the snapshot is at seq 4)"


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
async def test_one_request_id_twice_in_a_group_refuses_the_second_batch_alone(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path)
    outcomes: dict[str, str] = {}

    async def commit(name: str, b: Batch) -> None:
        try:
            await store.commit(b)
            outcomes[name] = "ok"
        except StoreError as e:
            outcomes[name] = e.code

    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        before = store.transactions
        async with anyio.create_task_group() as tg:  # queued together: one transaction
            tg.start_soon(commit, "first", batch("c1", 2, request=("alice", "r"), response=1))
            tg.start_soon(commit, "other", batch("c2", 1, create=True))
            tg.start_soon(commit, "second", batch("c1", 3, request=("alice", "r"), response=2))
        assert store.transactions == before + 1
        assert await store.lookup_request("alice", "r") == ("c1", 1)
    assert outcomes == {"first": "ok", "other": "ok", "second": "conflict"}
    assert [s for s, _ in logged(store, store.load_one("c1"))] == [1, 2]
    store.close()


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
    [combat] = loaded(store)
    store.close()
    assert len(encoded_in) == 1
    assert loop_thread not in encoded_in
    assert [e["event"] for e in logs] == ["snapshot_not_encoded"]
    assert (combat.snapshot, combat.last) == ((4, {"round": 3}), 5)


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
