"""Following (issue 12, part 3): a daemon that does not hold a combat serves its reads and
subscriptions from the log, woken by the other daemons' notifications, without taking its
lease. Real PostgreSQL, two real ``turnkeeper serve`` subprocesses."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import pytest

from daemon import (
    CallError,
    Client,
    Daemon,
    add_spidey,
    free_port,
    stop_all,
    two_daemons,
)
from postgres import lease, sql
from test_r16_tables import cli
from test_store_port import running
from turnkeeper.combats import Hub, RequestError, follow, registry
from turnkeeper.combats.combat import UNBUILT
from turnkeeper.combats.telling import Batch
from turnkeeper.store import StoreError
from turnkeeper.stores import changes, postgresql
from turnkeeper.stores.postgresql import PostgresStore
from turnkeeper_engine import NARRATOR, Actor
from turnkeeper_engine import commands as cmd

SEEN_WITHIN = 10.0
"""Seconds a subscriber on the other daemon may wait for an event (a poll is one second)."""


def _append_unreadable(dsn: str, combat: str, seq: int) -> None:
    """Append to ``combat``'s log, at ``seq``, an event no daemon of this version can read (as
    a newer daemon would in a rolling upgrade), and notify it as a commit would."""
    newer = msgpack.packb({"event": "from_a_newer_daemon", "at": 1.0})
    sql(
        dsn,
        "INSERT INTO turnkeeper.events (combat_id, seq, body) VALUES (%s, %s, %s)",
        combat,
        seq,
        newer,
    )
    sql(dsn, "UPDATE turnkeeper.combats SET last_seq = %s WHERE combat_id = %s", seq, combat)
    sql(dsn, "SELECT pg_notify(%s, %s)", changes.CHANNEL, json.dumps([[combat, seq]]))


def test_a_group_commits_combats_are_told_in_payloads_postgresql_takes() -> None:
    """PostgreSQL refuses a payload of 8000 bytes or more: a group of combats with long ids
    (128 four-byte characters each) is split, and every combat told once, with its table."""
    appended = [(f"{n:03}" + "\U0001f409" * 125, n, f"t{n:010x}") for n in range(200)]
    payloads = changes.payloads(appended)
    assert len(payloads) > 1
    assert all(len(p.encode()) < 8000 for p in payloads)
    told: changes.Changes = {}
    for p in payloads:
        told.update(changes.parse(p))
    assert told == {combat: (last, table) for combat, last, table in appended}
    assert changes.parse("not ours") == {}
    assert changes.parse('[["bank", 4, "t1", "more"]]') == {}


def test_a_payload_of_a_daemon_of_the_earlier_version_is_read_without_tables() -> None:
    """During a rolling upgrade, a daemon of the earlier version tells pairs, no table: read
    all the same, the table left to be asked of the store."""
    assert changes.parse('[["bank", 4], ["vault", 7]]') == {
        "bank": (4, None),
        "vault": (7, None),
    }


def _events(c: Client, count: int) -> list[dict[str, Any]]:
    """The next ``count`` event notifications' params."""
    seen = []
    while len(seen) < count:
        note = c.notification()
        assert note.method == "event", note
        seen.append(note.params)
    return seen


def _add(c: Client, name: str, **extra: Any) -> int:
    """Add a combatant to ``bank``, retried with its request id if refused with
    ``combat_moved``, as protocol.md tells clients to (a holder letting go as the command
    arrives: a late request to let go may meet the lease just taken back)."""
    params = {"request_id": name, "combat": "bank", "id": name, "display_name": name, **extra}
    try:
        done = c.call("add_combatant", **params)
    except CallError as e:
        if e.code != "combat_moved":
            raise
        done = c.call("add_combatant", **params)
    return int(done["seq"])


def _all_events(c: Client) -> list[dict[str, Any]]:
    page = c.call("history", combat="bank", after=0, limit=1000)
    return list(page["events"])


def test_a_subscriber_on_another_daemon_sees_every_event_in_order_across_moves(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b, watcher = a.client(), b.client(), b.client()
        add_spidey(at_a, "bank")
        owner, _, made = lease(postgres_db, "bank")
        assert watcher.call("subscribe", combat="bank", after=0)["seq"] == made
        assert [e["seq"] for e in _events(watcher, made)] == list(range(1, made + 1))
        # Reads on B leave the combat with A: no acquire, epoch 1 still.
        assert at_b.call("get_combat", combat="bank")["seq"] == made
        assert at_b.call("history", combat="bank", after=0, limit=10)["until"] == made
        assert lease(postgres_db, "bank")[:2] == (owner, 1)
        _add(at_a, "thor")  # at A, which holds it
        _add(at_b, "hulk")  # at B: the combat moves to B
        _add(at_a, "cap")  # and back to A
        last = _add(at_a, "wasp")
        seen = _events(watcher, last - made)
        assert [e["seq"] for e in seen] == list(range(made + 1, last + 1))
        assert [e["event"] for e in seen] == [e["event"] for e in _all_events(at_a)[made:]]
        assert lease(postgres_db, "bank")[0] == owner
        # A subscriber on A sees B's commands likewise.
        at_a.call("subscribe", combat="bank", after=last)
        more = _add(at_b, "ant")
        assert [e["seq"] for e in _events(at_a, more - last)] == list(range(last + 1, more + 1))
        assert [e["seq"] for e in _events(watcher, more - last)] == list(range(last + 1, more + 1))
    finally:
        stop_all(a, b)


def test_a_subscription_on_another_daemon_resumes_after_a_seq(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        add_spidey(at_a, "bank")
        made = _add(at_a, "thor")
        last = _add(at_a, "hulk")
        at_b.call("subscribe", combat="bank", after=made)
        assert [e["seq"] for e in _events(at_b, last - made)] == list(range(made + 1, last + 1))
        # Resumed from a seq read on A an instant ago: B reads the log that far first.
        again = b.client()
        newest = _add(at_a, "wasp")
        assert again.call("subscribe", combat="bank", after=newest)["seq"] == newest
        assert [e["seq"] for e in _events(at_b, newest - last)] == list(range(last + 1, newest + 1))
        newer = _add(at_a, "cap")
        assert [e["seq"] for e in _events(again, newer - newest)] == list(
            range(newest + 1, newer + 1)
        )
        last = newest
        assert [e["seq"] for e in _events(at_b, newer - last)] == list(range(last + 1, newer + 1))
    finally:
        stop_all(a, b)


def _player(d: Daemon) -> Client:
    assert d.tcp_port is not None
    c = Client.tcp(d.tcp_port)
    c.hello(d.token("player", "--user", "u1"))
    return c


def test_r16_hidden_combatants_stay_hidden_to_a_player_subscribed_on_another_daemon(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db, tcp=True)
    try:
        at_a = a.client()
        add_spidey(at_a, "bank")
        made = lease(postgres_db, "bank")[2]
        here, there = _player(a), _player(b)
        here.call("subscribe", combat="bank", after=0)
        there.call("subscribe", combat="bank", after=0)
        _add(at_a, "lurker", hidden=True)
        _add(at_a, "thor")
        last = _add(at_a, "loki", hidden=True)
        # The player is shown the combat as made and Thor's arrival, nothing of the hidden
        # two, the very same on the daemon that does not hold the combat.
        on_a, on_b = _events(here, made + 1), _events(there, made + 1)
        assert on_b == on_a
        assert "lurker" not in repr(on_b)
        assert "loki" not in repr(on_b)
        assert [e["seq"] for e in on_b][-1] < last
        assert lease(postgres_db, "bank")[1] == 1
    finally:
        stop_all(a, b)


def test_a_notification_missed_by_a_daemon_is_caught_up_from_the_log(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        add_spidey(at_a, "bank")
        made = lease(postgres_db, "bank")[2]
        at_b.call("subscribe", combat="bank", after=made)
        assert b.process is not None
        listener = f"turnkeeper listener pid {b.process.pid} %"
        ended = sql(
            postgres_db,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            listener,
        )
        assert ended == [(True,)]
        # Committed while B's listener is away (it opens a new session after a pause).
        last = _add(at_a, "thor")
        started = time.monotonic()
        assert [e["seq"] for e in _events(at_b, last - made)] == list(range(made + 1, last + 1))
        assert time.monotonic() - started < SEEN_WITHIN
    finally:
        stop_all(a, b)


def test_subscribe_all_on_another_daemon_sees_combats_made_there_since(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        assert at_b.call("subscribe_all")["seqs"] == {}
        add_spidey(at_a, "bank")  # made on A after B started
        last = _add(at_a, "thor")
        seen = _events(at_b, last)
        assert [(e["combat"], e["seq"]) for e in seen] == [("bank", s) for s in range(1, last + 1)]
        assert lease(postgres_db, "bank")[1] == 1
    finally:
        stop_all(a, b)


def test_a_read_where_a_combat_was_let_go_shows_what_its_new_holder_appended(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        add_spidey(at_b, "bank")  # held by B, nobody subscribed anywhere
        owner = lease(postgres_db, "bank")[0]
        last = _add(at_a, "thor")  # B lets it go to A
        assert lease(postgres_db, "bank")[0] != owner
        assert at_b.call("get_combat", combat="bank")["seq"] == last
        assert lease(postgres_db, "bank")[0] != owner
    finally:
        stop_all(a, b)


def test_r16_a_combat_another_daemon_made_stays_unknown_to_another_tables_token(
    tmp_path: Path, postgres_db: str
) -> None:
    """A combat made on A after B started is first known to B when read: the read itself
    must judge its table, or a token of table one on B would read table two's combat."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Daemon(tmp_path / "a", None, "--store", postgres_db)
    b = Daemon(tmp_path / "b", free_port(), "--store", postgres_db)
    postgresql.migrate(postgres_db)  # for the CLI: the daemons are not started yet
    one = cli(a, "table", "add", "One").strip()
    two = cli(a, "table", "add", "Two").strip()
    # Made before either daemon starts: the tables and tokens are the database's, B's too.
    secret = a.token("narrator", "--table", one)
    a.start()
    b.start()
    try:
        other = f"{two}/secret"
        add_spidey(a.client(), other)
        assert b.tcp_port is not None
        at_b = Client.tcp(b.tcp_port)
        at_b.hello(secret)
        for method, params in (
            ("get_combat", {}),
            ("history", {"after": 0}),
            ("subscribe", {"after": 0}),
        ):
            with pytest.raises(CallError) as refused:
                at_b.call(method, combat=other, **params)
            assert (refused.value.code, refused.value.field) == ("unknown_combat", "combat")
    finally:
        stop_all(a, b)


def _until_refused(c: Client, combat: str) -> CallError:
    """The refusal of a read of ``combat`` at ``c``'s daemon, once it comes."""
    deadline = time.monotonic() + SEEN_WITHIN
    while True:
        try:
            c.call("get_combat", combat=combat)
        except CallError as e:
            return e
        assert time.monotonic() < deadline, f"{combat} is still read"
        time.sleep(0.05)


def test_an_event_a_follower_cannot_read_sets_that_combat_aside_and_no_other(
    tmp_path: Path, postgres_db: str
) -> None:
    """An event the follower cannot decode (a newer daemon's, in a rolling upgrade, or a
    damaged row) quarantines that combat there alone: its reads are refused as any
    quarantined combat's, and every other combat is followed on. It stopped the daemon."""
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b, watcher = a.client(), b.client(), b.client()
        add_spidey(at_a, "bank")
        add_spidey(at_a, "vault")
        made = lease(postgres_db, "vault")[2]
        for combat in ("bank", "vault"):
            assert watcher.call("subscribe", combat=combat, after=made)["seq"] == made
        _append_unreadable(postgres_db, "bank", made + 1)
        refused = _until_refused(at_b, "bank")
        assert (refused.code, refused.field) == ("combat_quarantined", "combat")
        assert f"event {made + 1}" in refused.message
        rows = at_b.call("list_combats")
        assert {r["combat"]: "quarantined" in r for r in rows} == {"bank": True, "vault": False}
        last = at_a.call(
            "add_combatant", request_id="thor", combat="vault", id="thor", display_name="Thor"
        )["seq"]
        seen = _events(watcher, last - made)
        assert [(e["combat"], e["seq"]) for e in seen] == [
            ("vault", s) for s in range(made + 1, last + 1)
        ]
    finally:
        stop_all(a, b)


# -- listing on any daemon -------------------------------------------------------------------


def _made_on(c: Client, combat: str, added: int = 0) -> None:
    """``combat`` with Spider-Man and ``added`` more combatants."""
    add_spidey(c, combat)
    for n in range(added):
        name = f"hero{n}"
        c.call(
            "add_combatant",
            request_id=f"{combat}-{name}",
            combat=combat,
            id=name,
            display_name=name,
        )


def test_list_combats_on_another_daemon_lists_the_combats_made_there_since(
    tmp_path: Path, postgres_db: str
) -> None:
    """A hosted service behind a load balancer lists a table's combats on any daemon: those
    A made after B started are listed by B, with A's rows, paged by id across both daemons'
    combats, and so are the seqs of B's ``subscribe_all``. Reading the list moves no lease.
    B listed only its own combats."""
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        _made_on(at_a, "a0")
        _made_on(at_b, "b1")
        _made_on(at_a, "a2", added=2)
        _made_on(at_b, "b3", added=1)
        _made_on(at_a, "a4")
        owners = {c: lease(postgres_db, c)[0] for c in ("a0", "a2", "a4", "b1", "b3")}
        expected = at_a.call("list_combats")
        assert [r["combat"] for r in expected] == ["a0", "a2", "a4", "b1", "b3"]
        seqs = {r["combat"]: r["seq"] for r in expected}
        assert seqs == {c: lease(postgres_db, c)[2] for c in owners}
        assert seqs["a2"] > seqs["a0"]
        assert {r["ruleset"] for r in expected} == {"marvel"}
        assert at_b.call("list_combats") == expected
        pages = [at_b.call("list_combats", limit=2)]
        while len(pages[-1]) == 2:
            pages.append(at_b.call("list_combats", after=pages[-1][-1]["combat"], limit=2))
        assert [[r["combat"] for r in p] for p in pages] == [["a0", "a2"], ["a4", "b1"], ["b3"]]
        assert [r for p in pages for r in p] == expected
        assert at_b.call("list_combats", after="a2", limit=2) == expected[2:4]
        first = b.client().call("subscribe_all", limit=2)
        assert first == {"seqs": {"a0": seqs["a0"], "a2": seqs["a2"]}, "until": "a2", "more": True}
        everything = b.client().call("subscribe_all")
        assert everything == {"seqs": seqs, "until": "b3", "more": False}
        assert {c: lease(postgres_db, c)[0] for c in owners} == owners
    finally:
        stop_all(a, b)


def test_a_combat_listed_on_another_daemon_is_followed_from_the_seq_listed(
    tmp_path: Path, postgres_db: str
) -> None:
    """A ``subscribe_all`` on B names a combat A made since B started at its last seq; every
    later event of it comes to B's subscriber once, none before. B's answer named no such
    combat."""
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        _made_on(at_a, "bank")
        made = lease(postgres_db, "bank")[2]
        assert at_b.call("subscribe_all")["seqs"] == {"bank": made}
        last = _add(at_a, "thor")
        seen = _events(at_b, last - made)
        assert [(e["combat"], e["seq"]) for e in seen] == [
            ("bank", s) for s in range(made + 1, last + 1)
        ]
    finally:
        stop_all(a, b)


def test_r16_list_combats_on_another_daemon_shows_each_table_its_own_combats_made_there(
    tmp_path: Path, postgres_db: str
) -> None:
    """Read from the database, B's list is still cut to the session's tables: a token of
    table One on B lists One's combats A made and none of Two's, in ``list_combats`` and
    ``subscribe_all`` alike; Two's token the reverse; the operator both. B listed none of
    them."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Daemon(tmp_path / "a", None, "--store", postgres_db)
    b = Daemon(tmp_path / "b", free_port(), "--store", postgres_db)
    postgresql.migrate(postgres_db)  # for the CLI: the daemons are not started yet
    one = cli(a, "table", "add", "One").strip()
    two = cli(a, "table", "add", "Two").strip()
    # The tables and tokens are the database's: B's too.
    secrets = {one: a.token("narrator", "--table", one), two: a.token("observer", "--table", two)}
    a.start()
    b.start()
    try:
        at_a = a.client()
        made = {one: [f"{one}/vault", f"{one}/bank"], two: [f"{two}/secret"]}
        for combat in (*made[one], *made[two]):
            _made_on(at_a, combat)
        assert b.tcp_port is not None
        for table, combats in made.items():
            at_b = Client.tcp(b.tcp_port)
            at_b.hello(secrets[table])
            listed = sorted(combats)
            assert [r["combat"] for r in at_b.call("list_combats")] == listed
            assert [r["combat"] for r in at_b.call("list_combats", limit=1)] == listed[:1]
            assert list(at_b.call("subscribe_all")["seqs"]) == listed
        everything = sorted([*made[one], *made[two]])
        assert [r["combat"] for r in b.client().call("list_combats")] == everything
    finally:
        stop_all(a, b)


def test_a_quarantined_combat_keeps_its_row_among_combats_listed_from_the_database(
    tmp_path: Path, postgres_db: str
) -> None:
    """A combat B quarantined (an event it cannot read) shows as quarantined in B's list
    (quarantine is B's alone: the database does not know it), beside combats A made that B
    never read, listed from their stored rows; A lists it as it reads it. B's list had only
    the combat it had read."""
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        _made_on(at_a, "bank")
        made = lease(postgres_db, "bank")[2]
        at_b.call("subscribe", combat="bank", after=made)
        _append_unreadable(postgres_db, "bank", made + 1)
        assert _until_refused(b.client(), "bank").code == "combat_quarantined"
        _made_on(at_a, "cellar")
        _made_on(at_a, "vault")
        rows = at_b.call("list_combats")
        assert [r["combat"] for r in rows] == ["bank", "cellar", "vault"]
        assert rows[0]["quarantined"].startswith(f"replay failed at event {made + 1}")
        assert rows[1:] == at_a.call("list_combats", after="bank")
        assert b.client().call("subscribe_all")["seqs"] == {"cellar": made, "vault": made}
    finally:
        stop_all(a, b)


# -- two stores in one process, where a race must be forced ----------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


PLAYER = Actor("player", "u1")


class _Seen:
    """A subscriber that keeps the events it is sent (their params)."""

    narration: str | None = None

    def __init__(self, actor: Actor = NARRATOR) -> None:
        self.actor = actor
        self.sent: list[dict[str, Any]] = []

    def deliver(self, batch: Batch) -> bool:
        for message in batch.messages:
            self.sent.append(msgpack.unpackb(message)[2][0])
        return True

    def room(self) -> int:
        return 1000

    def lost(self) -> None:
        raise AssertionError("its events are always told")


@asynccontextmanager
async def _holder_and_follower(dsn: str) -> AsyncIterator[tuple[Hub, Hub]]:
    """Two daemons' hubs on ``dsn`` in this process, the second following (its listener
    started)."""
    stores = [PostgresStore.open(dsn, lease_seconds=60) for _ in range(2)]
    try:
        async with running(stores[0]), running(stores[1]), anyio.create_task_group() as tg:
            holder, follower = Hub(stores[0]), Hub(stores[1])
            await tg.start(follower.run_follow)
            yield holder, follower
            tg.cancel_scope.cancel()
    finally:
        for store in stores:
            store.close()


async def _made_with_a_hidden_lurker(hub: Hub, combat: str) -> int:
    """``combat``, with Spider-Man and a hidden lurker; its last seq."""
    await hub.execute("p", NARRATOR, combat, cmd.CreateCombat(combat, "marvel"), f"{combat}-1")
    await hub.execute("p", NARRATOR, combat, cmd.AddCombatant("spidey", "Spidey"), f"{combat}-2")
    lurker = cmd.AddCombatant("lurker", "Lurker", hidden=True)
    await hub.execute("p", NARRATOR, combat, lurker, f"{combat}-3")
    return hub.combats[combat].seq


@pytest.mark.anyio
async def test_r16_a_followed_combat_let_go_during_a_history_read_keeps_hidden_ones_hidden(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A combat followed here is let go (``MAX_FOLLOWED``) while a player's ``history`` page
    is read: the page is judged by the state it had, not by none (which hides nothing)."""
    monkeypatch.setattr(follow, "MAX_FOLLOWED", 1)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        await _made_with_a_hidden_lurker(holder, "bank")
        await _made_with_a_hidden_lurker(holder, "vault")
        shown = await follower.queries.history("bank", PLAYER, 0, 100)
        assert shown["events"]
        assert "lurker" not in repr(shown["events"])
        read = follower.store.events_after

        async def while_vault_is_read(combat_id: str, after: int, limit: int) -> Any:
            if combat_id == "bank":
                await follower.follower.ready("vault")  # bank is let go: one followed at most
                assert not follower.combats["bank"].followed
            return await read(combat_id, after, limit)

        monkeypatch.setattr(follower.store, "events_after", while_vault_is_read)
        again = await follower.queries.history("bank", PLAYER, 0, 100)
        assert again["events"] == shown["events"]


@pytest.mark.anyio
async def test_r16_a_followed_combat_is_not_let_go_in_the_middle_of_a_catch_up(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A player's ``subscribe`` catch-up reads a followed combat's log, its lock held, as
    another combat's first read would let it go (``MAX_FOLLOWED``): it is kept until the
    catch-up is told, which shows the hidden lurker no more than the holder would."""
    monkeypatch.setattr(follow, "MAX_FOLLOWED", 1)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        await _made_with_a_hidden_lurker(holder, "bank")
        await _made_with_a_hidden_lurker(holder, "vault")
        await follower.follower.ready("bank")
        read = follower.store.events_after

        async def while_vault_is_read(combat_id: str, after: int, limit: int) -> Any:
            if combat_id == "bank":
                await follower.follower.ready("vault")
            return await read(combat_id, after, limit)

        monkeypatch.setattr(follower.store, "events_after", while_vault_is_read)
        player = _Seen(PLAYER)
        await follower.subscribe("bank", player, 0)
        assert player.sent
        assert "lurker" not in repr(player.sent)
        assert follower.combats["bank"].state is not UNBUILT


@pytest.mark.anyio
async def test_r16_a_subscribe_that_waited_for_a_combat_let_go_meanwhile_reads_it_again(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A player's ``subscribe`` waits for a followed combat's lock; as it is let go, the
    combat is let go (``MAX_FOLLOWED``) before the subscribe resumes: the subscribe reads it
    again rather than tell the catch-up judged by no state."""
    monkeypatch.setattr(follow, "MAX_FOLLOWED", 1)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        await _made_with_a_hidden_lurker(holder, "bank")
        await _made_with_a_hidden_lurker(holder, "vault")
        bank = await follower.follower.ready("bank")
        player = _Seen(PLAYER)
        async with anyio.create_task_group() as tg:
            await bank.lock.acquire()
            tg.start_soon(follower.subscribe, "bank", player, 0)
            await anyio.sleep(0.1)  # it waits for the lock
            await follower.follower.ready("vault")  # bank is kept: its lock is held
            assert bank.followed
            bank.lock.release()
            follower.follower._evict()  # before the subscribe resumes: bank is let go
            assert not bank.followed
        assert player.sent
        assert "lurker" not in repr(player.sent)


async def _until(done: Callable[[], bool]) -> None:
    with anyio.fail_after(SEEN_WITHIN):
        while not done():
            await anyio.sleep(0.01)


def _unavailable() -> StoreError:
    return StoreError("store_unavailable", "the database server could not be reached: retry later")


@pytest.mark.anyio
async def test_events_a_follower_could_not_tell_are_told_at_its_next_read_not_skipped(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A combat made elsewhere, first heard of by a ``subscribe_all`` here: its events are
    read to be told, and that read fails (the server away a moment). The next commit's read
    tells them all, from the first: the seq told had been moved on before the telling."""
    async with _holder_and_follower(postgres_db) as (holder, follower):
        watcher = _Seen()
        await follower.subscribe_all(watcher)
        read = follower.store.events_after
        failed: list[int] = []

        async def failing_once(combat_id: str, after: int, limit: int) -> Any:
            if not failed:
                failed.append(after)
                raise _unavailable()
            return await read(combat_id, after, limit)

        monkeypatch.setattr(follower.store, "events_after", failing_once)
        await _made_with_a_hidden_lurker(holder, "bank")
        await _until(lambda: bool(failed))
        hulk = cmd.AddCombatant("hulk", "Hulk")
        await holder.execute("p", NARRATOR, "bank", hulk, "bank-hulk")
        last = holder.combats["bank"].seq
        await _until(lambda: bool(watcher.sent) and watcher.sent[-1]["seq"] == last)
        assert [e["seq"] for e in watcher.sent] == list(range(1, last + 1))


@pytest.mark.anyio
async def test_notifications_past_a_full_queue_have_the_follower_ask_the_store_once() -> None:
    """The event loop too busy to read what the listener hears: past ``WAKE_QUEUE`` waiting,
    notifications are dropped and counted, and the follower, once it reads on, is told to
    ask the store (None), once. They were dropped silently, leaving the
    combats they told of to the next poll."""
    relay = changes.Relay()
    told = [{f"c{n}": n} for n in range(changes.WAKE_QUEUE + 5)]
    for heard in told:
        relay.put(heard)
    relay.close()
    handed: list[Any] = []
    await relay.relay(handed.append)
    assert handed == [told[0], None, *told[1 : changes.WAKE_QUEUE]]
    assert relay.dropped == 5


def _seqs(seen: _Seen) -> dict[str, list[int]]:
    """The seqs told of each combat, in the order told."""
    told: dict[str, list[int]] = {}
    for e in seen.sent:
        told.setdefault(e["combat"], []).append(e["seq"])
    return told


@pytest.mark.anyio
async def test_a_subscribe_all_keeps_no_more_combats_followed_than_the_bound(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a ``subscribe_all``, every combat committing elsewhere is followed: past
    ``MAX_FOLLOWED`` the least recently read ones are let go all the same (none is
    subscribed by ``subscribe``), and read again at their next commit, with no event missed
    or told twice. They were kept, every one, whatever the bound."""
    monkeypatch.setattr(follow, "MAX_FOLLOWED", 2)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        watcher = _Seen()
        await follower.subscribe_all(watcher)
        names = [f"c{n}" for n in range(4)]
        for round_ in ("made", "thor", "hulk"):
            for combat in names:
                if round_ == "made":
                    await _made_with_a_hidden_lurker(holder, combat)
                else:
                    add = cmd.AddCombatant(round_, round_)
                    await holder.execute("p", NARRATOR, combat, add, f"{combat}-{round_}")
        lasts = {combat: holder.combats[combat].seq for combat in names}
        await _until(lambda: {c: s[-1] for c, s in _seqs(watcher).items()} == lasts)
        assert _seqs(watcher) == {c: list(range(1, last + 1)) for c, last in lasts.items()}
        assert sum(c.followed for c in follower.combats.values()) <= 2


@pytest.mark.anyio
async def test_a_subscribe_all_knows_no_more_combats_made_elsewhere_than_max_combats(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Combats made elsewhere that a ``subscribe_all`` here hears of are known here only
    while the daemon has room for them (``MAX_COMBATS``); past it they are passed over (and
    logged). They were added however many."""
    async with _holder_and_follower(postgres_db) as (holder, follower):
        names = [f"c{n}" for n in range(3)]
        for combat in names:
            await _made_with_a_hidden_lurker(holder, combat)
        monkeypatch.setattr(registry, "MAX_COMBATS", 2)
        watcher = _Seen()
        # Each listed, two known from its answer on.
        assert len((await follower.subscribe_all(watcher))["seqs"]) == 3
        for combat in names:
            add = cmd.AddCombatant("thor", "Thor")
            await holder.execute("p", NARRATOR, combat, add, f"{combat}-thor")
        await _until(lambda: len(_seqs(watcher)) >= 2)
        await anyio.sleep(0.5)  # the third commit's notification is heard by then
        assert len(follower.combats) == 2
        assert len(_seqs(watcher)) == 2


@pytest.mark.anyio
async def test_a_subscribe_all_judges_a_combat_made_elsewhere_by_the_table_told_not_a_query(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each commit tells its combat's table: a daemon whose ``subscribe_all`` follows one
    table knows, without asking the store, that another table's combat is none of its
    business, and that its own table's is. The store was asked at every commit of a
    combat of another table."""
    one, two = "t0000000001", "t0000000002"
    async with _holder_and_follower(postgres_db) as (holder, follower):
        watcher = _Seen()
        await follower.subscribe_all(watcher, scope=frozenset({one}))
        located: list[str] = []
        locate = follower.store.locate

        def counted(combat_id: str) -> str | None:
            located.append(combat_id)
            return locate(combat_id)

        monkeypatch.setattr(follower.store, "locate", counted)
        await _made_with_a_hidden_lurker(holder, f"{two}/bank")
        last = await _made_with_a_hidden_lurker(holder, f"{one}/vault")
        await _until(lambda: _seqs(watcher).get(f"{one}/vault", [0])[-1] == last)
        assert list(_seqs(watcher)) == [f"{one}/vault"]
        assert f"{two}/bank" not in follower.combats
        assert located == []


@pytest.mark.anyio
async def test_a_list_the_database_does_not_answer_in_time_is_store_unavailable(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page read from a database that does not answer is given up after the store's read
    timeout, answered ``store_unavailable``; a ``subscribe_all`` refused so subscribes
    nothing, and one asked again once the server answers is served."""
    async with _holder_and_follower(postgres_db) as (holder, follower):
        await _made_with_a_hidden_lurker(holder, "bank")
        store = follower.store
        assert isinstance(store, PostgresStore)
        monkeypatch.setattr(postgresql, "READ_TIMEOUT", 0.2)
        page = store._combat_page

        def hung(*args: Any) -> Any:
            time.sleep(1.0)
            return page(*args)

        monkeypatch.setattr(store, "_combat_page", hung)
        watcher = _Seen()
        for read in (follower.summaries(), follower.subscribe_all(watcher)):
            with pytest.raises(StoreError) as refused:
                await read
            assert refused.value.code == "store_unavailable"
        assert not follower.subscriptions.follows_all(watcher)
        monkeypatch.setattr(store, "_combat_page", page)
        await anyio.sleep(1.0)  # the hung read ends, freeing the reader's session
        assert list((await follower.subscribe_all(watcher))["seqs"]) == ["bank"]


@pytest.mark.anyio
async def test_combats_another_daemon_made_are_known_here_only_while_there_is_room(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_COMBATS`` a combat made elsewhere is still listed, from the database, but
    not known here; reading it is refused with ``too_many_combats`` rather than known past
    the bound. A read added it whatever the bound."""
    async with _holder_and_follower(postgres_db) as (holder, follower):
        for combat in ("c0", "c1", "c2"):
            await _made_with_a_hidden_lurker(holder, combat)
        monkeypatch.setattr(registry, "MAX_COMBATS", 1)
        rows = await follower.summaries()
        assert [r["combat"] for r in rows] == ["c0", "c1", "c2"]
        assert list(follower.combats) == ["c0"]
        with pytest.raises(RequestError) as refused:
            await follower.view("c2", NARRATOR)
        assert (refused.value.code, refused.value.field) == ("too_many_combats", "combat")
        assert list(follower.combats) == ["c0"]
        assert (await follower.view("c0", NARRATOR)) is not None


def test_a_subscribe_all_whose_daemons_listener_was_away_is_told_of_a_combat_made_meanwhile(
    tmp_path: Path, postgres_db: str
) -> None:
    """Made on A while B's listener is away: B's ``subscribe_all`` hears of it from the log
    (the store asked when the listener is back), not at that combat's next commit."""
    a, b = two_daemons(tmp_path, postgres_db)
    try:
        at_a, at_b = a.client(), b.client()
        assert at_b.call("subscribe_all")["seqs"] == {}
        assert b.process is not None
        ended = sql(
            postgres_db,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            f"turnkeeper listener pid {b.process.pid} %",
        )
        assert ended == [(True,)]
        add_spidey(at_a, "bank")
        last = lease(postgres_db, "bank")[2]
        seen = _events(at_b, last)
        assert [(e["combat"], e["seq"]) for e in seen] == [("bank", s) for s in range(1, last + 1)]
    finally:
        stop_all(a, b)


@pytest.mark.anyio
async def test_a_lost_notification_of_a_combat_a_subscribe_all_watches_is_read_from_the_store(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notifications of 'bank' are lost (the follower handed None instead, as after an
    overflow or a new listening session): its events still reach a ``subscribe_all``."""
    real = follow.Follower.woken

    def lossy(self: follow.Follower, told: changes.Changes | None) -> None:
        real(self, None if told is not None and "bank" in told else told)

    monkeypatch.setattr(follow.Follower, "woken", lossy)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        watcher = _Seen()
        await follower.subscribe_all(watcher)
        last = await _made_with_a_hidden_lurker(holder, "bank")
        with anyio.fail_after(SEEN_WITHIN):
            while len(watcher.sent) < last:
                await anyio.sleep(0.05)
        assert [e["seq"] for e in watcher.sent] == list(range(1, last + 1))


@pytest.mark.anyio
async def test_a_commit_heard_while_a_subscribe_all_reads_its_page_is_told_to_it(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another daemon's commit lands after the page was read, its notification heard before
    the answer is made: the subscriber is answered at a seq and told every event after it."""
    async with _holder_and_follower(postgres_db) as (holder, follower):
        await _made_with_a_hidden_lurker(holder, "bank")
        await follower.summaries()  # bank known here, read by nobody
        real = follower.store.combat_page

        async def racing(*args: Any) -> Any:
            rows = await real(*args)
            hulk = cmd.AddCombatant("hulk", "Hulk")
            await holder.execute("p", NARRATOR, "bank", hulk, "bank-hulk")
            await anyio.sleep(0.5)  # its notification handled here meanwhile
            return rows

        monkeypatch.setattr(follower.store, "combat_page", racing)
        watcher = _Seen()
        told = await follower.subscribe_all(watcher)
        now = holder.combats["bank"].seq
        answered = told["seqs"]["bank"]
        with anyio.fail_after(SEEN_WITHIN):
            while len(watcher.sent) < now - answered:
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)  # nothing more comes
        assert [e["seq"] for e in watcher.sent] == list(range(answered + 1, now + 1))
        assert answered < now


@pytest.mark.anyio
async def test_a_subscribe_all_while_a_read_starts_following_the_combat_is_told_no_duplicate(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read here starts following 'bank' (its lock held while its log is read) as a
    ``subscribe_all`` lists it: told every event after the seq it was answered with, once."""
    async with _holder_and_follower(postgres_db) as (holder, follower):
        await _made_with_a_hidden_lurker(holder, "bank")
        await follower.summaries()  # bank known here, read by nobody
        hulk = cmd.AddCombatant("hulk", "Hulk")
        await holder.execute("p", NARRATOR, "bank", hulk, "bank-hulk")
        now = holder.combats["bank"].seq
        real = follower.rebuilder.read_unleased

        async def slow(combat_id: str) -> Any:
            found = await real(combat_id)
            await anyio.sleep(0.5)
            return found

        monkeypatch.setattr(follower.rebuilder, "read_unleased", slow)
        watcher = _Seen()
        async with anyio.create_task_group() as tg:
            tg.start_soon(follower.follower.ready, "bank")
            await anyio.sleep(0.1)
            told = await follower.subscribe_all(watcher)
        await anyio.sleep(1.5)
        answered = told["seqs"]["bank"]
        assert [e["seq"] for e in watcher.sent] == list(range(answered + 1, now + 1))


@pytest.mark.anyio
async def test_a_subscribe_all_while_missed_events_are_told_page_by_page_is_told_no_duplicate(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``subscribe_all`` made while a combat's missed events are told a page at a time is
    answered at the last seq told so far, and told the rest once."""
    monkeypatch.setattr(follow, "PAGE", 1)
    real_woken = follow.Follower.woken

    def deaf(self: follow.Follower, told: changes.Changes | None) -> None:
        if told is None or "bank" not in told:
            real_woken(self, told)

    monkeypatch.setattr(follow.Follower, "woken", deaf)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        first = await _made_with_a_hidden_lurker(holder, "bank")
        await follower.subscribe_all(_Seen())  # bank watched here from `first`
        for name in ("hulk", "thor", "loki"):
            await holder.execute("p", NARRATOR, "bank", cmd.AddCombatant(name, name), name)
        now = holder.combats["bank"].seq
        real_read = follower.follower._read

        async def slow(*args: Any) -> Any:
            found = await real_read(*args)
            await anyio.sleep(0.3)
            return found

        monkeypatch.setattr(follower.follower, "_read", slow)
        follower.follower.missed()  # its events read from the store, a page at a time
        with anyio.fail_after(SEEN_WITHIN):
            while not follower.combats["bank"].lock.locked():
                await anyio.sleep(0.01)
        await anyio.sleep(0.4)  # a page told, more to come
        watcher = _Seen()
        answered = (await follower.subscribe_all(watcher))["seqs"]["bank"]
        await anyio.sleep(2.0)
        assert first < answered < now
        assert [e["seq"] for e in watcher.sent] == list(range(answered + 1, now + 1))


@pytest.mark.anyio
async def test_a_combat_nobody_here_follows_yet_whose_notifications_are_lost_is_polled(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every notification of 'bank' is lost and nothing tells the follower to ask the store
    (no new listening session, no overflow): a ``subscribe_all`` made before 'bank' existed
    is told its every event, by the periodic poll of the combats changed since its
    watermark, which covers combats nobody here followed when they changed."""
    real = follow.Follower.woken

    def deaf(self: follow.Follower, told: changes.Changes | None) -> None:
        if told is not None and "bank" not in told:
            real(self, told)

    monkeypatch.setattr(follow.Follower, "woken", deaf)
    async with _holder_and_follower(postgres_db) as (holder, follower):
        watcher = _Seen()
        assert (await follower.subscribe_all(watcher))["seqs"] == {}
        await anyio.sleep(follow.POLL_SECONDS * 1.5)  # the answer's own asking done
        last = await _made_with_a_hidden_lurker(holder, "bank")
        with anyio.fail_after(SEEN_WITHIN):
            while len(watcher.sent) < last:
                await anyio.sleep(0.05)
        await _made_with_a_hidden_lurker(holder, "vault")  # heard: the follower listens on
        await anyio.sleep(follow.POLL_SECONDS * 1.5)
        assert [e["seq"] for e in watcher.sent if e["combat"] == "bank"] == list(range(1, last + 1))


@pytest.mark.anyio
async def test_r16_a_combat_of_another_table_the_poll_finds_stays_unknown_to_a_subscribe_all(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every notification is lost: the poll finds the combats of every table that changed,
    and a ``subscribe_all`` of one table is told its own table's combat alone, the other
    never known here."""
    real = follow.Follower.woken

    def deaf(self: follow.Follower, told: changes.Changes | None) -> None:
        if told is None:
            real(self, told)

    monkeypatch.setattr(follow.Follower, "woken", deaf)
    one, two = "t0000000001", "t0000000002"
    async with _holder_and_follower(postgres_db) as (holder, follower):
        watcher = _Seen()
        await follower.subscribe_all(watcher, scope=frozenset({one}))
        await _made_with_a_hidden_lurker(holder, f"{two}/bank")
        last = await _made_with_a_hidden_lurker(holder, f"{one}/vault")
        await _until(lambda: _seqs(watcher).get(f"{one}/vault", [0])[-1] == last)
        await anyio.sleep(follow.POLL_SECONDS * 1.5)  # another poll, nothing more
        assert list(_seqs(watcher)) == [f"{one}/vault"]
        assert f"{two}/bank" not in follower.combats
