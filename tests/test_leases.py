"""Many daemons on one PostgreSQL (issue 12, part 3): each combat leased by one daemon at a
time, every append fenced by the lease's epoch in the database itself, a daemon that cannot
renew fencing itself, and ownership moving to the daemon a combat's commands arrive at. Real
PostgreSQL, real stores, real ``turnkeeper serve`` subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import psycopg
import pytest
from structlog.testing import capture_logs

from daemon import CALL_TIMEOUT, Daemon, add_spidey, on_store, stop_all
from postgres import lease as _lease
from postgres import logged_seqs, sql
from test_daemon_clock import _setup
from test_hub import _Now, _started, _until_changed
from test_store_port import _outcomes, batch, event, logged, running
from turnkeeper.combats import Hub, RequestError, clock, rebuild
from turnkeeper.combats.combat import UNBUILT, Combat
from turnkeeper.combats.deadlines import Deadlines
from turnkeeper.combats.rebuild import Rebuilder
from turnkeeper.combats.registry import Combats
from turnkeeper.store import Batch, LoadedCombat, StoreError, _Pending
from turnkeeper.stores import postgresql
from turnkeeper.stores.postgresql import FENCE_MARGIN, SCHEMA, PostgresStore
from turnkeeper_engine import NARRATOR
from turnkeeper_engine import commands as cmd
from turnkeeper_engine.events import CombatCreated, CommandRecorded
from turnkeeper_engine.pipeline import Proposal, RefusedError
from turnkeeper_engine.plain import event_to_plain
from turnkeeper_sdk import hookimpl, wire
from turnkeeper_sdk.client import CallError
from turnkeeper_sdk.plugins import PluginHost

FAILOVER_SECONDS = 5.0
"""Issue 12's bound: a dead owner's combats are served by another daemon within this."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _expire(dsn: str, store: PostgresStore) -> None:
    """Make the server count ``store``'s leases run out (its daemon paused past them): its
    heartbeat an hour old. Its renewer makes it fresh again within a quarter of its lease."""
    sql(
        dsn,
        f"UPDATE {SCHEMA}.daemons SET heartbeat = now() - interval '1 hour' WHERE daemon_id = %s",
        store.daemon_id,
    )


# -- two stores in one process ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_stale_owners_append_is_refused_by_the_fence_in_the_database(
    postgres_db: str,
) -> None:
    """A paused owner (its lease run out by the server's clock, its own clock not yet past its
    margin) writes a group: the conditional UPDATE finds another epoch, that combat alone is
    rolled back and refused, the rest of the group lands."""
    old = PostgresStore.open(postgres_db, lease_seconds=60)
    new = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(old), running(new):
            await old.commit(batch("c1", 1, create=True))
            await old.commit(batch("c2", 1, create=True))
            assert _lease(postgres_db, "c1") == (old.daemon_id, 1, 1)
            # The server's clock says the old owner's lease ran out (it was paused past it).
            _expire(postgres_db, old)
            loaded = await anyio.to_thread.run_sync(new.load_one, "c1")  # acquires: epoch 2
            assert (loaded.last, _lease(postgres_db, "c1")) == (1, (new.daemon_id, 2, 1))
            await new.commit(batch("c1", 2))
            outcomes: dict[str, BaseException | None] = {}

            async def commit(combat_id: str, seq: int) -> None:
                try:
                    await old.commit(batch(combat_id, seq))
                    outcomes[combat_id] = None
                except StoreError as e:
                    outcomes[combat_id] = e

            async with anyio.create_task_group() as tg:  # one group commit, both batches
                tg.start_soon(commit, "c1", 2)
                tg.start_soon(commit, "c2", 2)
            moved = outcomes["c1"]
            assert isinstance(moved, StoreError)
            assert (moved.code, moved.field) == ("combat_moved", "combat")
            assert outcomes["c2"] is None
            # And it stays refused: the old owner no longer counts itself the holder.
            with pytest.raises(StoreError) as again:
                await old.commit(batch("c1", 3))
            assert again.value.code == "combat_moved"
        assert _lease(postgres_db, "c1")[1:] == (2, 2)
        assert logged(new, new.load_one("c1")) == [(1, event(1)), (2, event(2))]
    finally:
        old.close()
        new.close()


@pytest.mark.anyio
async def test_a_last_seq_remembered_behind_the_log_is_checked_against_the_database(
    postgres_db: str,
) -> None:
    """The committer remembers where each combat's log ends, to spare a read per commit; a
    number behind the log (a commit that finished as the daemon, paused, lost the combat and
    took it back, its acquire having forgotten the number first) is a shortcut gone wrong,
    not a reason to refuse: the batch is checked against the database, and lands."""
    store = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(store):
            await store.commit(batch("c1", 1, create=True))
            await store.commit(batch("c1", 2))
            store._last["c1"] = 1
            await store.commit(batch("c1", 3))
        assert logged_seqs(postgres_db, "c1") == [1, 2, 3]
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_store_that_cannot_renew_stops_writing_before_its_lease_runs_out(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore.open(postgres_db, lease_seconds=1.0)
    try:
        async with running(store):
            await store.commit(batch("c1", 1, create=True))

            def unreachable(*_: object) -> None:
                raise psycopg.OperationalError("the server cannot be reached")

            monkeypatch.setattr(postgresql._Leases, "_renew", unreachable)
            await anyio.sleep(1.0 * (1 - FENCE_MARGIN))
            with pytest.raises(StoreError) as fenced:
                await store.commit(batch("c1", 2))
            assert fenced.value.code == "combat_moved"
        # Refused by the daemon itself: the database still has it as the holder, epoch 1,
        # and nothing of the refused batch.
        assert _lease(postgres_db, "c1") == (store.daemon_id, 1, 1)
    finally:
        monkeypatch.undo()
        store.close()


@pytest.mark.anyio
async def test_a_request_to_let_go_heard_while_the_event_loop_stalls_leaves_renewals_going(
    postgres_db: str,
) -> None:
    """The renewer hands a request to let a combat go to the event loop without waiting for
    it: an event loop stalled past most of a lease (a long rebuild, the GIL) does not stop the
    renewals, so the daemon does not fence itself from every combat it holds."""
    store = PostgresStore.open(postgres_db, lease_seconds=1.0)
    try:
        async with running(store):
            await store.commit(batch("c1", 1, create=True))

            def ask() -> None:
                time.sleep(0.1)  # once the event loop stalls
                sql(postgres_db, "SELECT pg_notify(%s, 'another:c1')", store._leases.channel)

            threading.Thread(target=ask).start()
            time.sleep(1.0)  # the event loop stalls for a whole lease
            await store.commit(batch("c1", 2))  # still its holder: renewed meanwhile
            with anyio.fail_after(CALL_TIMEOUT):
                assert await store.release_requests().receive() == "c1"
        assert _lease(postgres_db, "c1") == (store.daemon_id, 1, 2)
    finally:
        store.close()


@pytest.mark.anyio
async def test_an_acquire_asks_the_holder_which_lets_go_after_its_minimum_hold(
    postgres_db: str,
) -> None:
    holder = PostgresStore.open(postgres_db)
    asker = PostgresStore.open(postgres_db)
    try:
        async with running(holder), running(asker):
            await holder.commit(batch("c1", 1, 2, create=True))
            asked: list[str] = []

            async def let_go() -> None:
                async for combat_id in holder.release_requests():
                    asked.append(combat_id)
                    await anyio.sleep(holder.hold_left(combat_id))
                    await holder.release(combat_id)
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(let_go)
                with anyio.fail_after(CALL_TIMEOUT):
                    loaded = await anyio.to_thread.run_sync(asker.load_one, "c1")
            assert (asked, loaded.last) == (["c1"], 2)
            assert _lease(postgres_db, "c1") == (asker.daemon_id, 2, 2)
            await asker.commit(batch("c1", 3))
            with pytest.raises(StoreError) as refused:
                await holder.commit(batch("c1", 3))
            assert refused.value.code == "combat_moved"
    finally:
        holder.close()
        asker.close()
    # Closed cleanly, each gave its leases back.
    assert _lease(postgres_db, "c1")[0] is None


@pytest.mark.anyio
async def test_a_holder_letting_go_in_the_middle_of_an_acquire_is_no_reason_to_load_without_it(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder lets go just as an acquire finds it holding the combat: the acquire tries
    again (and takes it), never taking the row without an owner for no such combat."""
    maker = PostgresStore.open(postgres_db, lease_seconds=60)
    asker = PostgresStore.open(postgres_db)
    try:
        async with running(maker), running(asker):
            await maker.commit(batch("c1", 1, create=True))
            loader = asker._loader
            execute = loader.execute
            statements = 0

            def let_go_after_the_first(query: Any, params: Any = None) -> Any:
                nonlocal statements
                found = execute(query, params)
                if params is not None and statements == 0:
                    statements += 1  # the acquire's first try: the holder lets go now
                    sql(postgres_db, f"UPDATE {SCHEMA}.combats SET owner = NULL")
                return found

            monkeypatch.setattr(loader, "execute", let_go_after_the_first)
            with anyio.fail_after(CALL_TIMEOUT):
                loaded = await anyio.to_thread.run_sync(asker.load_one, "c1")
            monkeypatch.undo()
            assert loaded.last == 1
            assert _lease(postgres_db, "c1") == (asker.daemon_id, 2, 1)
            await asker.commit(batch("c1", 2))
    finally:
        monkeypatch.undo()
        maker.close()
        asker.close()


@pytest.mark.anyio
async def test_a_daemon_whose_lease_ran_out_holding_a_combats_row_has_its_sessions_ended(
    postgres_db: str,
) -> None:
    """Not only the owner: any daemon paused with a combat's row locked (here one that was
    in the middle of taking it) holds up nobody once its lease has run out: every session
    naming it is ended, which rolls its transaction back."""
    store = PostgresStore.open(postgres_db)
    try:
        async with running(store):
            await store.commit(batch("c1", 1, create=True))
            await store.release("c1")
            sql(
                postgres_db,
                f"INSERT INTO {SCHEMA}.daemons (daemon_id, lease_seconds, heartbeat)"
                " VALUES ('paused', 3, now() - interval '10 minutes')",
            )
            paused = psycopg.connect(postgres_db, application_name="turnkeeper loader paused pid 1")
            try:
                paused.execute(f"SELECT 1 FROM {SCHEMA}.combats WHERE combat_id = 'c1' FOR UPDATE")
                with anyio.fail_after(CALL_TIMEOUT):
                    loaded = await anyio.to_thread.run_sync(store.load_one, "c1")
                with pytest.raises(psycopg.OperationalError):  # its session was ended
                    paused.execute("SELECT 1")
            finally:
                paused.close()
            assert loaded.last == 1
            assert _lease(postgres_db, "c1") == (store.daemon_id, 2, 1)
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_lease_let_go_on_request_goes_to_the_asker_not_the_holders_next_command(
    postgres_db: str,
) -> None:
    """The holder lets go with a command of its own queued behind the release: that command's
    acquire finds the lease kept for the asker, which takes it at its next poll."""
    holder = PostgresStore.open(postgres_db)
    asker = PostgresStore.open(postgres_db)
    try:
        async with running(holder), running(asker):
            await holder.commit(batch("c1", 1, create=True))
            took: list[int | None] = []

            async def let_go() -> None:
                async for combat_id in holder.release_requests():
                    await anyio.sleep(holder.hold_left(combat_id))
                    await holder.release(combat_id)
                    # The holder's own next command for it, at once.
                    tried = partial(postgresql._try_acquire, combat_id, holder.daemon_id)
                    took.append(holder._read("loader", tried)[3])
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(let_go)
                with anyio.fail_after(CALL_TIMEOUT):
                    await anyio.to_thread.run_sync(asker.load_one, "c1")
            assert took == [None]
            assert _lease(postgres_db, "c1") == (asker.daemon_id, 2, 1)
    finally:
        holder.close()
        asker.close()


@pytest.mark.anyio
async def test_a_commit_whose_answer_was_lost_is_not_taken_for_landed_from_another_daemons_events(
    postgres_db: str,
) -> None:
    """A group whose COMMIT was sent when its session was lost is looked up on a new session.
    The combat's last seq alone would say "landed" once another daemon has acquired the
    combat and appended as far: what the batch wrote is compared instead."""
    old = PostgresStore.open(postgres_db, lease_seconds=60)
    new = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(old), running(new):
            await old.commit(batch("c1", 1, create=True))
            _expire(postgres_db, old)
            await anyio.to_thread.run_sync(new.load_one, "c1")
            await new.commit(batch("c1", 2, 2, pad="the new owner's"))
            pack = msgpack.Packer(use_bin_type=True).pack

            def pending(b: Batch) -> _Pending:  # as the committer had it
                return _Pending(
                    b,
                    [("c1", b.first_seq + i, pack(e)) for i, e in enumerate(b.events)],
                    None,
                    None,
                )

            lost = pending(batch("c1", 2, 2))
            found = pending(batch("c1", 2, 2, pad="the new owner's"))
            assert old._landed([lost]) is False
            assert old._landed([found]) is True  # what is there is found
    finally:
        old.close()
        new.close()


@pytest.mark.anyio
async def test_a_request_id_another_daemon_stored_is_found_once_a_store_is_no_longer_alone(
    postgres_db: str,
) -> None:
    """Alone on its database, a store rules never-stored request ids out by its filter, without
    a read; once it has seen another daemon, it reads them from the database, where the other
    may have stored them."""
    first = PostgresStore.open(postgres_db, lease_seconds=1.0)
    try:
        async with running(first):
            await first.commit(batch("c1", 1, create=True))  # builds its filter
            assert first._leases.alone
            second = PostgresStore.open(postgres_db)
            try:
                async with running(second):
                    await second.commit(
                        batch("c2", 1, create=True, request=("al", "r"), response=1)
                    )
                    with anyio.fail_after(CALL_TIMEOUT):
                        while first._leases.alone:  # its next renewal sees the other
                            await anyio.sleep(0.05)
                    assert await first.lookup_request("al", "r") == ("c2", 1)
            finally:
                second.close()
    finally:
        first.close()


@pytest.mark.anyio
async def test_a_tick_refused_as_moved_holds_up_no_other_combats_deadline(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A combat taken over by another daemon has its tick refused (``combat_moved``): the
    clock goes on to the next combat due at once, no failure's pause for it."""
    monkeypatch.setattr(clock, "CLOCK_RETRY_SECONDS", 3600.0)  # a pause would outlast the test
    now = _Now(1000.0)
    store = PostgresStore.open(postgres_db, lease_seconds=60)
    hub = Hub(store, clock=now)
    try:
        async with running(store), anyio.create_task_group() as tg:
            for combat in ("moved", "due"):  # each turn's deadline: 1001.0, "moved" first
                await _started(hub, combat, turn_time_limit=1.0, turn_warning=0.0)
            sql(
                postgres_db,
                f"UPDATE {SCHEMA}.combats SET owner = 'another', owner_epoch = owner_epoch + 1"
                " WHERE combat_id = 'moved'",
            )
            seqs = {combat: hub.combats[combat].seq for combat in hub.combats}
            tg.start_soon(hub.run_clock)
            now.t = 1001.5
            await _until_changed(hub, "due", seqs["due"])
            assert logged_seqs(postgres_db, "moved")[-1] == seqs["moved"]  # nothing of its tick
            tg.cancel_scope.cancel()
    finally:
        store.close()


@pytest.mark.anyio
async def test_waiting_for_a_lease_takes_no_rebuild_slot_from_a_combat_that_is_free(
    postgres_db: str,
) -> None:
    """Combats whose holder keeps them (more of them than rebuilds run at once) leave a free
    combat's first use to load at once, not after their acquires give up."""
    holder = PostgresStore.open(postgres_db, lease_seconds=60)
    asker = PostgresStore.open(postgres_db, lease_seconds=1.0)  # gives up after 3 s
    hub = Hub(asker)
    held = [f"held{i}" for i in range(rebuild.LOAD_THREADS)]
    try:
        async with running(holder), running(asker), anyio.create_task_group() as tg:
            for combat_id in [*held, "free"]:
                await holder.commit(batch(combat_id, 1, create=True))
            await holder.release("free")
            waited: list[str] = []

            async def use(combat_id: str) -> None:
                with contextlib.suppress(StoreError):  # the holder never lets go
                    await hub.rebuilder.ready(combat_id)
                waited.append(combat_id)

            for combat_id in held:
                tg.start_soon(use, combat_id)
            await anyio.sleep(0.3)  # their acquires are waiting for the holder
            # Its log (a store test's events, not the engine's) is quarantined once read.
            with anyio.fail_after(CALL_TIMEOUT), pytest.raises(RequestError):
                await hub.rebuilder.ready("free")
            assert hub.combats["free"].loaded
            assert waited == []  # loaded while the others still wait
    finally:
        holder.close()
        asker.close()


async def _renewed(dsn: str, store: PostgresStore) -> None:
    """Until the store's renewer has made its first renewal (and look around)."""
    with anyio.fail_after(CALL_TIMEOUT):
        while not sql(
            dsn,
            f"SELECT 1 FROM {SCHEMA}.daemons WHERE daemon_id = %s AND heartbeat > started",
            store.daemon_id,
        ):
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_a_retry_of_a_request_another_daemon_stored_unseen_gets_the_first_result(
    postgres_db: str,
) -> None:
    """A daemon that came and went between two renewals stored a request id: its retry at a
    daemon that still counts itself alone passes the filter, and the database refuses it
    again; the first result is then read and given, never ``conflict``."""
    first = PostgresStore.open(postgres_db, lease_seconds=600)  # no renewal during the test
    try:
        async with running(first):
            hub = Hub(first)
            await hub.execute("p", NARRATOR, "k1", cmd.CreateCombat("k1", "marvel"), "k1-create")
            await _renewed(postgres_db, first)
            second = PostgresStore.open(postgres_db, lease_seconds=600)
            create = cmd.CreateCombat("k2", "marvel")
            try:
                async with running(second):
                    made = await Hub(second).execute("p", NARRATOR, "k2", create, "r")
            finally:
                second.close()
            assert await hub.execute("p", NARRATOR, "k2", create, "r") == made
    finally:
        first.close()


@pytest.mark.anyio
async def test_a_request_id_stored_again_tells_a_store_it_is_not_alone(postgres_db: str) -> None:
    """A daemon that came and went between two renewals (its row deleted on its clean stop)
    is never seen by them: the database refusing an id it stored tells the store instead, and
    from then on such ids are read from the database, not ruled out by the filter."""
    first = PostgresStore.open(postgres_db, lease_seconds=600)  # no renewal during the test
    try:
        async with running(first):
            await first.commit(batch("c1", 1, create=True))  # builds its filter
            await _renewed(postgres_db, first)
            second = PostgresStore.open(postgres_db, lease_seconds=60)
            try:
                async with running(second):
                    request = ("al", "r")
                    await second.commit(batch("c2", 1, create=True, request=request, response=1))
            finally:
                second.close()
            with pytest.raises(StoreError) as refused:
                await first.commit(batch("c1", 2, request=("al", "r"), response=2))
            assert refused.value.code == "conflict"
            assert await first.lookup_request("al", "r") == ("c2", 1)
    finally:
        first.close()


def test_only_the_daemon_holding_a_combat_runs_its_clock() -> None:
    """On a shared store, a combat known only from its stored summary may be another daemon's:
    its deadline is not this daemon's to fire until it has loaded it (and so holds it)."""
    summary = {"ruleset": "marvel", "phase": "turns", "round": 1, "seq": 5, "deadline": 100.0}
    combat = Combat("bank", UNBUILT, 5, loaded=False, summary=summary)
    assert Deadlines().due(combat) == 100.0  # a store of its own: due from its summary
    assert Deadlines(owned_only=True).due(combat) is None


@pytest.mark.anyio
async def test_a_load_another_daemon_appends_behind_is_refused_as_moved_not_quarantined(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load counts the log as it acquires, then replays it: when the lease is lost in between
    (the daemon let the combat go, or was paused past its lease) and another daemon appends,
    the combat is left unloaded (``combat_moved``), to be read again. Found by the cluster
    test: it quarantined the combat for a log longer than counted ("seq 481 is missing (the
    log reached 474)")."""
    recorded = event_to_plain(CommandRecorded("create_combat", NARRATOR, 1000.0))
    created = event_to_plain(CombatCreated("c1", "marvel", ()))
    old = PostgresStore.open(postgres_db, lease_seconds=60)
    new = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(old), running(new):
            await old.commit(Batch("c1", 1, (recorded, created), "marvel", None, None, 1000.0))
            deadlines = Deadlines(owned_only=True)
            rebuilder = Rebuilder(old, Combats(deadlines), deadlines, time.time, 1000)
            count = old.load_one

            def then_taken_over(combat_id: str) -> LoadedCombat:
                counted = count(combat_id)
                _expire(postgres_db, old)
                new.load_one(combat_id)
                anyio.from_thread.run(
                    new.commit, Batch("c1", 3, (recorded,), None, None, None, 1000.0)
                )
                return counted

            monkeypatch.setattr(old, "load_one", then_taken_over)
            rebuilt = await anyio.to_thread.run_sync(rebuilder._rebuild, "c1", threading.Event())
            assert rebuilt.quarantined is None
            assert rebuilt.unavailable is not None
            assert rebuilt.unavailable.code == "combat_moved"
            assert logged_seqs(postgres_db, "c1") == [1, 2, 3]
    finally:
        old.close()
        new.close()


class _WatchedLock(asyncio.Lock):
    """A combat's writer lock that tells when a task waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = anyio.Event()

    async def acquire(self) -> bool:
        if self.locked():
            self.waited.set()
        return await super().acquire()


@pytest.mark.anyio
async def test_a_command_decided_before_a_lease_moved_away_and_back_is_refused_as_moved(
    postgres_db: str,
) -> None:
    """A command waiting for its combat's lock while the daemon lets the combat go decides on
    the state as it was let go; if its batch reaches the committer once the daemon holds the
    combat again (another daemon appended meanwhile), it is refused as ``combat_moved`` (its
    state was read under an older lease), never ``conflict``, and its retry applies it after
    the other daemon's events. Found by the cluster test: three commands refused with
    ``conflict`` at one instant by one daemon."""
    mine = PostgresStore.open(postgres_db, lease_seconds=60)
    other = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(mine), running(other), anyio.create_task_group() as tg:
            hub, elsewhere = Hub(mine), Hub(other)
            await hub.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "make")
            combat = hub.combats["bank"]
            combat.lock = lock = _WatchedLock()
            thor = cmd.AddCombatant("thor", "Thor")
            answers: list[Any] = []

            async def add_thor() -> None:
                try:
                    answers.append(await hub.execute("p", NARRATOR, "bank", thor, "thor"))
                except RefusedError as e:
                    answers.append(e)

            async with lock:  # as the daemon's release does, once asked for the combat
                tg.start_soon(add_thor)
                with anyio.fail_after(CALL_TIMEOUT):
                    await lock.waited.wait()  # the command waits for the lock, its combat held
                hub.rebuilder.forget(combat)
                await mine.release("bank")
                hulk = cmd.AddCombatant("hulk", "Hulk")
                added = await elsewhere.execute("p", NARRATOR, "bank", hulk, "hulk")
                _expire(postgres_db, other)  # held up, the other daemon lets its lease run out
                # Another command here takes the combat back (its load waits for the lock).
                await anyio.to_thread.run_sync(mine.acquire, "bank")
            with anyio.fail_after(CALL_TIMEOUT):
                while not answers:
                    await anyio.sleep(0.01)
            refused = answers[0]
            assert isinstance(refused, RefusedError)
            assert (refused.code, refused.field) == ("combat_moved", "combat")
            assert logged_seqs(postgres_db, "bank") == list(range(1, added["seq"] + 1))
            retried = await hub.execute("p", NARRATOR, "bank", thor, "thor")
            assert retried["events"][0]["seq"] == added["seq"] + 1
            assert logged_seqs(postgres_db, "bank") == list(range(1, retried["seq"] + 1))
            tg.cancel_scope.cancel()
    finally:
        mine.close()
        other.close()


@pytest.mark.anyio
async def test_a_request_to_let_go_of_an_older_lease_is_ignored_by_a_holder_that_took_it_back(
    postgres_db: str,
) -> None:
    """An asker asks again every ``ASK_AGAIN`` until it has the combat: a request it sent just
    before, heard only once the holder has taken the combat back, is about the lease the holder
    let go, and would make it give up the new one for nothing (its next command then waits for
    the combat, or is refused as moved). Each request names the epoch it is about: the holder
    keeps a newer lease, and lets go of the lease a request is about."""
    holder = PostgresStore.open(postgres_db, lease_seconds=60)
    asker = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(holder), running(asker), anyio.create_task_group() as tg:
            hub = Hub(holder)
            tg.start_soon(hub.run_releases)
            await hub.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "make")
            hub.rebuilder.forget(hub.combats["bank"])  # asked for: let go, as the hub does
            await holder.release("bank")
            # The asker acquires it, and lets it go (its own client moved on, say).
            await anyio.to_thread.run_sync(asker.acquire, "bank")
            await asker.release("bank")
            thor = cmd.AddCombatant("thor", "Thor")
            await hub.execute("p", NARRATOR, "bank", thor, "thor")  # the holder's again
            assert _lease(postgres_db, "bank")[:2] == (holder.daemon_id, 3)
            for about in (1, 2):  # the asks heard late, about the leases given up since
                await anyio.to_thread.run_sync(
                    _notify, postgres_db, holder, f"{asker.daemon_id}/{about}:bank"
                )
            await anyio.sleep(postgresql.MIN_HOLD + 0.5)
            assert _lease(postgres_db, "bank")[:2] == (holder.daemon_id, 3)
            hulk = cmd.AddCombatant("hulk", "Hulk")
            await hub.execute("p", NARRATOR, "bank", hulk, "hulk")  # served here, not moved
            assert _lease(postgres_db, "bank")[:2] == (holder.daemon_id, 3)
            # An ask about the lease held is heard as ever.
            await anyio.to_thread.run_sync(
                _notify, postgres_db, holder, f"{asker.daemon_id}/3:bank"
            )
            with anyio.fail_after(CALL_TIMEOUT):
                while _lease(postgres_db, "bank")[0] is not None:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    finally:
        holder.close()
        asker.close()


def _notify(dsn: str, store: PostgresStore, payload: str) -> None:
    """A request to ``store``'s daemon, as another daemon's acquire sends it."""
    sql(dsn, "SELECT pg_notify(%s, %s)", f"turnkeeper_release_{store.daemon_id}", payload)


# -- daemons ----------------------------------------------------------------------------------


def _daemons(tmp_path: Path, dsn: str) -> tuple[Daemon, Daemon]:
    """Two daemons on one database, each with its own data directory and socket."""
    a, b = on_store(tmp_path, dsn, ("a", "b"))
    return a, b


def test_a_command_at_another_daemon_moves_the_combat_there_and_keeps_seqs_gapless(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = _daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        add_spidey(at_a, "bank")  # made on A after B started: B hears of it from the database
        at_a.call("start_combat", request_id="start", combat="bank")
        seq = at_a.call("get_combat", combat="bank")["seq"]
        added = at_b.call(
            "add_combatant", request_id="hulk", combat="bank", id="hulk", display_name="Hulk"
        )
        assert added["seq"] > seq
        assert _lease(postgres_db, "bank")[1] == 2  # acquired by B: epoch 2
        # And back, twice: each move goes through the holder letting go.
        at_a.call("add_combatant", request_id="thor", combat="bank", id="thor", display_name="Thor")
        at_b.call("add_combatant", request_id="cap", combat="bank", id="cap", display_name="Cap")
        last = at_b.call("get_combat", combat="bank")["seq"]
        assert logged_seqs(postgres_db, "bank") == list(range(1, last + 1))
        assert _lease(postgres_db, "bank")[1] == 4
        # A retried request id gets its first result, on whichever daemon it lands.
        assert at_b.call(
            "add_combatant", request_id="thor", combat="bank", id="thor", display_name="Thor"
        ) == at_a.call(
            "add_combatant", request_id="thor", combat="bank", id="thor", display_name="Thor"
        )
        assert logged_seqs(postgres_db, "bank") == list(range(1, last + 1))
    finally:
        stop_all(a, b)


def test_creating_a_combat_another_daemon_made_is_refused_combat_exists_not_conflict(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = _daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        made = at_a.call("create_combat", request_id="a", combat_id="bank", ruleset="marvel")
        # B has not heard of it (made after B started, never used there): the database
        # refuses B's row, and B answers as for any existing combat, which a client can act on.
        with pytest.raises(CallError) as refused:
            at_b.call("create_combat", request_id="b", combat_id="bank", ruleset="dnd3e")
        assert (refused.value.code, refused.value.field) == ("combat_exists", "combat_id")
        # The same request id retried at B still gets A's first result.
        again = at_b.call("create_combat", request_id="a", combat_id="bank", ruleset="marvel")
        assert again == made
        assert logged_seqs(postgres_db, "bank") == list(range(1, made["seq"] + 1))
    finally:
        stop_all(a, b)


def test_a_killed_owners_combat_is_served_by_another_daemon_within_five_seconds(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = _daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()  # connected first: no set-up inside the measure
        add_spidey(at_a, "bank")
        acknowledged = at_a.call("start_combat", request_id="start", combat="bank")["seq"]
        killed = time.monotonic()  # the clock starts as the kill is sent
        a.kill()
        added = at_b.call(
            "add_combatant", request_id="hulk", combat="bank", id="hulk", display_name="Hulk"
        )
        taken = time.monotonic() - killed
        assert taken < FAILOVER_SECONDS, f"served {taken:.2f} s after the kill"
        assert added["seq"] == acknowledged + len(added["events"])  # nothing acknowledged lost
        assert logged_seqs(postgres_db, "bank") == list(range(1, added["seq"] + 1))
    finally:
        stop_all(a, b)


def test_an_owner_stopped_past_its_lease_can_never_append_once_it_runs_again(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = _daemons(tmp_path, postgres_db)
    try:
        at_a = a.client()
        add_spidey(at_a, "bank")
        at_a.call("start_combat", request_id="start", combat="bank")
        pending = a.client()
        assert a.process is not None
        a.process.send_signal(signal.SIGSTOP)
        # A command for A while it is stopped: it waits, unread, in A's socket.
        pending.send_raw(
            wire.pack(
                wire.Request(
                    7,
                    "add_combatant",
                    {"request_id": "thor", "combat": "bank", "id": "thor", "display_name": "Thor"},
                )
            )
        )
        # B takes the combat over once A's lease runs out, and appends.
        added = b.client().call(
            "add_combatant", request_id="hulk", combat="bank", id="hulk", display_name="Hulk"
        )
        logged_before = logged_seqs(postgres_db, "bank")
        assert logged_before == list(range(1, added["seq"] + 1))
        a.process.send_signal(signal.SIGCONT)
        answer = pending.response(7)
        # Resumed, A either refuses the command it had pending (its lease gone by its own
        # clock, or by the fence in the database), or, if its renewer found the lease lost
        # first and dropped the combat, takes the combat back and applies the command after
        # B's events. Never on the state it had when it stopped.
        applied = answer.result
        if answer.error is not None:
            assert answer.error.code == "combat_moved"
            assert logged_seqs(postgres_db, "bank") == logged_before  # nothing of A's appended
            applied = at_a.call(
                "add_combatant", request_id="thor", combat="bank", id="thor", display_name="Thor"
            )
        assert applied["events"][0]["seq"] == added["seq"] + 1
        assert logged_seqs(postgres_db, "bank") == list(range(1, applied["seq"] + 1))
        assert _lease(postgres_db, "bank")[1] == 3  # A acquired it again
    finally:
        stop_all(a, b)


def test_an_append_in_flight_when_another_daemon_acquires_is_refused_by_the_fence(
    tmp_path: Path, postgres_db: str
) -> None:
    """The fence is in the append itself: a daemon whose group commit is on its way, its lease
    valid by its own clock when it began, still appends nothing once another daemon has
    acquired the combat (here the acquire is the test's, holding the row while the daemon's
    conditional UPDATE waits for it)."""
    d = Daemon(tmp_path, None, "--store", postgres_db).start()
    try:
        c = d.client()
        add_spidey(c, "bank")
        before = logged_seqs(postgres_db, "bank")
        with psycopg.connect(postgres_db) as db:
            db.execute(f"SELECT 1 FROM {SCHEMA}.combats WHERE combat_id = 'bank' FOR UPDATE")
            c.send_raw(
                wire.pack(
                    wire.Request(
                        7,
                        "add_combatant",
                        {"request_id": "thor", "combat": "bank", "id": "thor", "display_name": "T"},
                    )
                )
            )
            _wait_for_committer_lock(postgres_db)
            # Another daemon acquires (one with no heartbeat, its lease run out at once: the
            # first may take the combat straight back on its retry).
            db.execute(
                f"UPDATE {SCHEMA}.combats SET owner = 'another', owner_epoch = owner_epoch + 1"
                " WHERE combat_id = 'bank'"
            )
        answer = c.response(7)
        assert answer.error is not None
        assert (answer.error.code, answer.error.field) == ("combat_moved", "combat")
        assert logged_seqs(postgres_db, "bank") == before
        retried = c.call(
            "add_combatant", request_id="thor", combat="bank", id="thor", display_name="T"
        )
        assert logged_seqs(postgres_db, "bank") == list(range(1, retried["seq"] + 1))
        assert _lease(postgres_db, "bank")[1] == 3
    finally:
        stop_all(d)


def test_an_owner_paused_in_the_middle_of_a_commit_holds_nothing_up_and_appends_nothing(
    tmp_path: Path, postgres_db: str
) -> None:
    """Paused with its transaction open (its conditional UPDATE done, the row locked), the
    owner would hold the combat's row until it ran again: the daemon taking the combat over
    once its lease has run out ends that session, and the resumed owner's append, written
    again on a new session, is refused by the fence."""
    a, b = _daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()  # connected first: no set-up inside the measure
        add_spidey(at_a, "bank")
        with psycopg.connect(postgres_db) as db:
            db.execute(f"SELECT 1 FROM {SCHEMA}.combats WHERE combat_id = 'bank' FOR UPDATE")
            at_a.send_raw(
                wire.pack(
                    wire.Request(
                        7,
                        "add_combatant",
                        {"request_id": "thor", "combat": "bank", "id": "thor", "display_name": "T"},
                    )
                )
            )
            _wait_for_committer_lock(postgres_db)
            assert a.process is not None
            stopped = time.monotonic()
            a.process.send_signal(signal.SIGSTOP)
        # The row is A's now, in A's open transaction, A stopped.
        added = at_b.call(
            "add_combatant", request_id="hulk", combat="bank", id="hulk", display_name="Hulk"
        )
        taken = time.monotonic() - stopped
        assert taken < FAILOVER_SECONDS, f"served {taken:.2f} s after the stop"
        logged_before = logged_seqs(postgres_db, "bank")
        assert logged_before == list(range(1, added["seq"] + 1))
        a.process.send_signal(signal.SIGCONT)
        answer = at_a.response(7)
        assert answer.error is not None
        assert answer.error.code == "combat_moved"
        assert logged_seqs(postgres_db, "bank") == logged_before
    finally:
        stop_all(a, b)


def _wait_for_committer_lock(dsn: str) -> None:
    """Until a daemon's committer waits for a row lock (the test's)."""
    deadline = time.monotonic() + CALL_TIMEOUT
    while not sql(
        dsn,
        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND application_name LIKE 'turnkeeper committer%%'",
    ):
        assert time.monotonic() < deadline, "the daemon's append never reached the row"
        time.sleep(0.01)


def test_a_retry_racing_its_original_across_a_move_gets_the_first_result(
    tmp_path: Path, postgres_db: str
) -> None:
    """A request in flight at the holder (its append held up), retried at another daemon: the
    retry finds nothing stored yet, waits for the lease, and once it has it finds the first
    result, rather than apply the command again (which the database would refuse)."""
    a, b = _daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        add_spidey(at_a, "bank")
        params = {"request_id": "thor", "combat": "bank", "id": "thor", "display_name": "T"}
        holder = _lease(postgres_db, "bank")[0]
        with psycopg.connect(postgres_db, autocommit=True) as heard:
            heard.execute(f'LISTEN "turnkeeper_release_{holder}"')
            with psycopg.connect(postgres_db) as db:
                db.execute(f"SELECT 1 FROM {SCHEMA}.combats WHERE combat_id = 'bank' FOR UPDATE")
                at_a.send_raw(wire.pack(wire.Request(7, "add_combatant", params)))
                _wait_for_committer_lock(postgres_db)
                at_b.send_raw(wire.pack(wire.Request(8, "add_combatant", params)))
                # B asks A for the lease: past its lookup, which found nothing.
                asked = heard.notifies(timeout=CALL_TIMEOUT, stop_after=1)
                assert [n.payload.partition(":")[2] for n in asked] == ["bank"]
        first, retried = at_a.response(7), at_b.response(8)
        assert (first.error, retried.error) == (None, None)
        assert retried.result == first.result
        assert logged_seqs(postgres_db, "bank") == list(range(1, first.result["seq"] + 1))
    finally:
        stop_all(a, b)


@pytest.mark.parametrize("stop", ["kill", "clean"])
def test_r13_a_deadline_nobody_holds_fires_on_its_own_after_a_restart(
    tmp_path: Path, postgres_db: str, stop: str
) -> None:
    """One daemon on PostgreSQL, stopped (killed, its lease left to run out, or cleanly, its
    lease given back) past a turn's deadline and started again: the deadline fires with no
    command or read for the combat, once."""
    d = Daemon(tmp_path, None, "--store", postgres_db).start()
    try:
        with d.client() as gm:
            _setup(gm, "overdue", turn_time_limit=1.0, turn_warning=0.0)
            started = gm.call("start_combat", request_id="start", combat="overdue")
        (turn,) = [e for e in started["events"] if e["event"] == "turn_started"]
        if stop == "kill":
            d.kill()
        else:
            assert d.stop() == 0
        time.sleep(max(0.0, turn["deadline"] + 0.5 - time.time()))
        d.start()
        assert _expired_once_fired(d, postgres_db, "overdue", started["seq"]) == ["ann"]
    finally:
        stop_all(d)


def _expired_once_fired(d: Daemon, dsn: str, combat: str, after: int) -> list[str]:
    """Wait, with no command or read for ``combat``, until its log grows past ``after`` (its
    deadline fired), then the combatants whose turn timer expired since."""
    deadline = time.monotonic() + CALL_TIMEOUT
    while logged_seqs(dsn, combat)[-1] == after:
        assert time.monotonic() < deadline, f"the deadline of {combat} never fired"
        time.sleep(0.05)
    with d.client() as gm:
        history = gm.call("history", combat=combat, after=after)
    return [e["combatant"] for e in history["events"] if e["event"] == "turn_timer_expired"]


def _at_schema_5(dsn: str) -> None:
    """The database made again at schema version 5 by the migrations, with its combats as
    they were, written as a daemon of that version writes them: no stored deadline."""
    columns = {
        "combats": "combat_id, table_id, ruleset, created_at, last_seq",
        "events": "combat_id, seq, body",
        "snapshots": "combat_id, seq, body",
        "summaries": "combat_id, body",
    }
    kept = {
        name: sql(dsn, f"SELECT {listed} FROM {SCHEMA}.{name}") for name, listed in columns.items()
    }
    with psycopg.connect(dsn) as db, db.transaction():
        db.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
        db.execute(f"CREATE SCHEMA {SCHEMA}")
        db.execute(
            f"CREATE TABLE {SCHEMA}.schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in postgresql.MIGRATIONS[:5]:
            db.execute(migration.sql.encode())
            db.execute(
                f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
        with db.cursor() as cur:
            for name, rows in kept.items():
                if rows:
                    marks = ", ".join(["%s"] * len(rows[0]))
                    cur.executemany(
                        f"INSERT INTO {SCHEMA}.{name} ({columns[name]}) VALUES ({marks})", rows
                    )


def test_r13_a_deadline_of_a_combat_last_written_before_version_6_fires_with_nobody_holding_it(
    tmp_path: Path, postgres_db: str
) -> None:
    """A combat whose turn runs out, in a database at schema version 5 (no stored deadlines):
    once migrated, its deadline fires with no command or read for the combat, once."""
    d = Daemon(tmp_path, None, "--store", postgres_db).start()
    try:
        with d.client() as gm:
            _setup(gm, "old", turn_time_limit=1.0, turn_warning=0.0)
            started = gm.call("start_combat", request_id="start", combat="old")
        (turn,) = [e for e in started["events"] if e["event"] == "turn_started"]
        assert d.stop() == 0
        _at_schema_5(postgres_db)
        time.sleep(max(0.0, turn["deadline"] + 0.5 - time.time()))
        d.start()  # migrates to this version first
        assert _expired_once_fired(d, postgres_db, "old", started["seq"]) == ["ann"]
    finally:
        stop_all(d)


def test_a_daemon_stopped_cleanly_lets_its_combats_go_at_once(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = _daemons(tmp_path, postgres_db)
    try:
        add_spidey(a.client(), "bank")
        assert a.stop() == 0
        assert _lease(postgres_db, "bank")[0] is None
        added = b.client().call(
            "add_combatant", request_id="hulk", combat="bank", id="hulk", display_name="Hulk"
        )
        assert _lease(postgres_db, "bank")[1:] == (2, added["seq"])
    finally:
        stop_all(a, b)


@pytest.mark.anyio
async def test_a_shared_store_reads_no_request_id_before_a_command_and_finds_a_repeat_as_it_ends(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon not alone on its database decides a new command with no read of its request
    id. A retry of a command another daemon committed, landing where the combat is now held,
    is decided anew on the newer state: accepted, its commit finds the id stored (nothing of it
    kept); refused, or changing nothing, the id is read then. Either way the client gets the
    first result, and an id reused for another command is refused."""
    reads: list[str] = []
    stored = PostgresStore._stored_request

    def counted(self: PostgresStore, principal: str, request_id: str) -> Any:
        reads.append(request_id)
        return stored(self, principal, request_id)

    monkeypatch.setattr(PostgresStore, "_stored_request", counted)
    first = PostgresStore.open(postgres_db, lease_seconds=60)
    second = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(first), running(second):
            assert not second._leases.alone  # it saw the first as it opened
            at_first, at_second = Hub(first), Hub(second)
            note = cmd.RecordOutcome("note", "one")
            hulk = cmd.AddCombatant("hulk", "Hulk")
            await at_first.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "c")
            noted = await at_first.execute("p", NARRATOR, "bank", note, "note")
            added = await at_first.execute("p", NARRATOR, "bank", hulk, "hulk")
            at_first.rebuilder.forget(at_first.combats["bank"])
            await first.release("bank")
            reads.clear()
            # New commands on the second daemon: its load and commits, no read of their ids.
            await at_second.execute("p", NARRATOR, "bank", cmd.RecordOutcome("note", "2"), "2")
            last = await at_second.execute("p", NARRATOR, "bank", cmd.AddCombatant("x", "X"), "x")
            assert reads == []
            # Accepted again on the newer state: the commit finds the id; nothing appended.
            assert await at_second.execute("p", NARRATOR, "bank", note, "note") == noted
            # Refused on the newer state (hulk is there): the id is read.
            assert await at_second.execute("p", NARRATOR, "bank", hulk, "hulk") == added
            other = cmd.RecordOutcome("note", "another")
            with pytest.raises(RequestError) as reused:
                await at_second.execute("p", NARRATOR, "bank", other, "note")
            assert reused.value.code == "request_id_reused"
            assert reads == ["note", "hulk", "note"]  # the repeats' only
            assert logged_seqs(postgres_db, "bank") == list(range(1, last["seq"] + 1))
            assert at_second.combats["bank"].seq == last["seq"]
    finally:
        first.close()
        second.close()


@pytest.mark.anyio
async def test_a_repeat_in_a_group_is_refused_alone_and_nothing_of_it_is_kept(
    postgres_db: str,
) -> None:
    """A batch whose request id another daemon stored, committed in one group with others:
    it alone is refused (``conflict``, its events rolled back with its savepoint), the others
    land, and the first answer is the one remembered."""
    first = PostgresStore.open(postgres_db, lease_seconds=60)
    second = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(first), running(second):
            await first.commit(batch("c1", 1, create=True, request=("al", "r"), response=1))
            await second.commit(batch("c2", 1, create=True))
            outcomes = await _outcomes(
                second,
                {
                    "repeat": batch("c2", 2, request=("al", "r"), response=2),
                    "other": batch("c3", 1, create=True, request=("al", "s"), response=3),
                    "plain": batch("c2x", 1, create=True),
                },
            )
            assert outcomes == {"repeat": "conflict", "other": "ok", "plain": "ok"}
            assert logged_seqs(postgres_db, "c2") == [1]
            assert logged_seqs(postgres_db, "c3") == [1]
            assert await second.lookup_request("al", "r") == ("c1", 1)
            assert await second.lookup_request("al", "s") == ("c3", 3)
    finally:
        first.close()
        second.close()


class _Announcer:
    """A plugin with a before hook whose proposal commits a command of its own."""

    @hookimpl
    def before_action_declared(self, combatant: Any) -> cmd.Command:
        return cmd.RecordOutcome("note", f"{combatant.id} is about to act")


@dataclass
class _BeforeNotes(PluginHost):
    """A plugin host whose hooks also stand before ``record_outcome``, a command the engine
    accepts again on any later state (today's before hooks stand before none such): each run
    counted, and proposing a note of its own, as a before hook may."""

    runs: list[str] = field(default_factory=list)

    def before_hooks(self, command: cmd.Command) -> bool:
        return isinstance(command, cmd.RecordOutcome) or super().before_hooks(command)

    async def before(self, state: Any, seq: int, command: cmd.Command, actor: Any) -> Any:
        if isinstance(command, cmd.RecordOutcome) and command.kind == "note":
            self.runs.append(command.text)
            yield Proposal(actor, cmd.RecordOutcome("note", "the hook's own"))
            return
        async for proposal in super().before(state, seq, command, actor):
            yield proposal


@pytest.mark.anyio
async def test_a_repeat_of_a_command_with_before_hooks_is_looked_up_before_they_run(
    postgres_db: str,
) -> None:
    """A before hook may commit a command of its own ahead of the one it stands before: a
    repeat decided anew would run it again before its commit found the id. So such commands
    are looked up first, on a shared store too: the retry gets the first result, its hooks do
    not run again and nothing more is appended."""
    first = PostgresStore.open(postgres_db, lease_seconds=60)
    second = PostgresStore.open(postgres_db, lease_seconds=60)
    plugins = _BeforeNotes()
    plugins.register(_Announcer(), "announcer")  # a per-command plugin: the hooks are used
    try:
        async with running(first), running(second):
            assert not second.alone  # it saw the first as it opened
            at_first, at_second = Hub(first), Hub(second, plugins=plugins)
            await at_first.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "c")
            note = cmd.RecordOutcome("note", "one")
            noted = await at_first.execute("p", NARRATOR, "bank", note, "note")
            at_first.rebuilder.forget(at_first.combats["bank"])
            await first.release("bank")
            assert await at_second.execute("p", NARRATOR, "bank", note, "note") == noted
            assert plugins.runs == []
            assert logged_seqs(postgres_db, "bank") == list(range(1, noted["seq"] + 1))
    finally:
        first.close()
        second.close()
        plugins.stop()


@pytest.mark.anyio
async def test_a_daemon_alone_looks_a_retried_id_up_first_and_stays_alone(
    postgres_db: str,
) -> None:
    """A retry after a restart (its answer no longer in memory) at a daemon alone on its
    database is looked up before it is decided: the first result, and the daemon still counts
    itself alone, with no store error in its log (the database never refused the id)."""
    note = cmd.RecordOutcome("note", "one")
    store = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(store):
            hub = Hub(store)
            await hub.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "c")
            noted = await hub.execute("p", NARRATOR, "bank", note, "note")
    finally:
        store.close()
    store = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(store):
            assert store.alone
            with capture_logs() as logs:
                assert await Hub(store).execute("p", NARRATOR, "bank", note, "note") == noted
            assert store.alone
            assert [e["event"] for e in logs if e["event"].startswith("store_")] == []
            assert logged_seqs(postgres_db, "bank") == list(range(1, noted["seq"] + 1))
    finally:
        store.close()


@pytest.mark.anyio
async def test_a_repeat_found_by_its_commit_is_logged_as_a_repeat_not_a_store_error(
    postgres_db: str,
) -> None:
    """A retry storm after a failover is no fault of the store's: each repeat the database
    refuses is one info line (``store_request_repeated``), no ``store_error`` warning."""
    first = PostgresStore.open(postgres_db, lease_seconds=60)
    second = PostgresStore.open(postgres_db, lease_seconds=60)
    try:
        async with running(first), running(second):
            await first.commit(batch("c1", 1, create=True, request=("al", "r"), response=1))
            await second.commit(batch("c2", 1, create=True))
            with capture_logs() as logs, pytest.raises(StoreError) as refused:
                await second.commit(batch("c2", 2, request=("al", "r"), response=2))
            assert refused.value.code == "conflict"
            assert [(e["event"], e["log_level"]) for e in logs] == [
                ("store_request_repeated", "info")
            ]
    finally:
        first.close()
        second.close()
