"""Following (issue 12, part 3): a daemon that does not hold a combat serves its reads and
subscriptions from the log, woken by the other daemons' notifications, without taking its
lease. Real PostgreSQL, two real ``turnkeeper serve`` subprocesses."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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
from turnkeeper.stores import changes, postgresql

SEEN_WITHIN = 10.0
"""Seconds a subscriber on the other daemon may wait for an event (a poll is one second)."""


def test_a_group_commits_combats_are_told_in_payloads_postgresql_takes() -> None:
    """PostgreSQL refuses a payload of 8000 bytes or more: a group of combats with long ids
    (128 four-byte characters each) is split, and every combat told once."""
    appended = [(f"{n:03}" + "\U0001f409" * 125, n) for n in range(200)]
    payloads = changes.payloads(appended)
    assert len(payloads) > 1
    assert all(len(p.encode()) < 8000 for p in payloads)
    told: dict[str, int] = {}
    for p in payloads:
        told.update(changes.parse(p))
    assert told == dict(appended)
    assert changes.parse("not ours") == {}


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
