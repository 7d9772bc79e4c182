"""R13 The combat clock, end to end: the daemon lets time pass by itself, and its deadlines are
absolute times in the log, so a SIGKILL and a restart neither lose nor reset them."""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, running
from turnkeeper.combats.clock import MAX_CLOCK_EVENTS_PER_SECOND

WAIT = 15.0
"""Longest wait for something the clock should do within a second or two: a noisy machine may
be slow, never this slow."""
PROMPT = 2.0
"""After a restart, an overdue deadline is applied within this many seconds of start-up."""
CLOCK = {"role": "narrator", "user": None, "via": "clock"}
"""The actor the daemon's own clock records (R13)."""

_ids = itertools.count()


def _setup(gm: Client, combat: str, **options: Any) -> None:
    """ann (17) then bob (12), marvel, no bonus round; not started."""
    gm.call(
        "create_combat",
        request_id=f"{combat}-create",
        combat_id=combat,
        ruleset="marvel",
        options=[[k, v] for k, v in options.items()],
    )
    for cid, faces in (("ann", [6, 6, 5]), ("bob", [4, 4, 4])):
        gm.call(
            "add_combatant", request_id=f"{combat}-{cid}", combat=combat, id=cid, display_name=cid
        )
        gm.call(
            "roll_initiative",
            request_id=f"{combat}-roll-{cid}",
            combat=combat,
            combatant=cid,
            faces=faces,
        )


def _do(gm: Client, combat: str, method: str, **params: Any) -> Any:
    return gm.call(method, combat=combat, request_id=f"{combat}-{next(_ids)}", **params)


def _watch(d: Daemon, combat: str, after: int | None = None) -> Client:
    c = d.client()
    if after is None:
        after = int(c.call("get_combat", combat=combat)["seq"])
    c.call("subscribe", combat=combat, after=after)
    return c


def _until(c: Client, name: str, timeout: float = WAIT) -> list[dict[str, Any]]:
    """Events up to and including the first ``name``, waiting at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen: list[dict[str, Any]] = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            c.sock.settimeout(left)
            note = c.notification()
            if note.method == "event":
                seen.append(note.params)
                if note.params["event"] == name:
                    return seen
    except TimeoutError:
        pytest.fail(f"no {name} within {timeout:g} s; saw {[e['event'] for e in seen]}")
    finally:
        c.sock.settimeout(CALL_TIMEOUT)


def _tick_before(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The clock's ``command_recorded`` for the tick that produced the first ``name``."""
    index = next(i for i, e in enumerate(events) if e["event"] == name)
    recorded = [e for e in events[:index] if e["event"] == "command_recorded"][-1]
    assert (recorded["command"], recorded["actor"]) == ("tick", CLOCK)
    return recorded


def _turn(gm: Client, combat: str) -> dict[str, Any]:
    turn = gm.call("get_combat", combat=combat)["view"]["turn"]
    assert isinstance(turn, dict)
    return turn


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("clock")) as d:
        yield d


@pytest.fixture
def gm(daemon: Daemon) -> Iterator[Client]:
    c = daemon.client()
    yield c
    c.close()


def test_r13_turn_timer_warns_expires_and_starts_the_next_turn_by_itself(
    daemon: Daemon, gm: Client
) -> None:
    _setup(gm, "timer", turn_time_limit=1.5, turn_warning=1.0)
    watcher = _watch(daemon, "timer")
    started = _do(gm, "timer", "start_combat")
    (first,) = [e for e in started["events"] if e["event"] == "turn_started"]
    assert first["combatant"] == "ann"
    deadline, warn_at = first["deadline"], first["warn_at"]
    assert deadline == pytest.approx(first["at"] + 1.5)
    assert warn_at == pytest.approx(deadline - 1.0)

    # No client says a word from here on.
    events = _until(watcher, "turn_timer_warning")
    events += _until(watcher, "turn_started")
    names = [e["event"] for e in events if e["event"] != "command_recorded"]
    assert names[names.index("turn_timer_warning") :] == [
        "turn_timer_warning",
        "turn_timer_expired",
        "turn_ended",
        "turn_started",
    ]
    by_name = {e["event"]: e for e in events}
    assert by_name["turn_timer_warning"]["combatant"] == "ann"
    assert by_name["turn_timer_warning"]["deadline"] == deadline
    assert _tick_before(events, "turn_timer_warning")["at"] >= warn_at
    assert (
        by_name["turn_timer_expired"]["combatant"],
        by_name["turn_timer_expired"]["action"],
    ) == (
        "ann",
        "end_turn",
    )
    assert _tick_before(events, "turn_timer_expired")["at"] >= deadline
    assert (by_name["turn_ended"]["combatant"], by_name["turn_ended"]["reason"]) == ("ann", "timer")
    nxt = by_name["turn_started"]
    assert nxt["combatant"] == "bob"
    assert nxt["deadline"] == pytest.approx(nxt["at"] + 1.5)
    # The warning came once: the expiry did not repeat it.
    assert names.count("turn_timer_warning") == 1
    _do(gm, "timer", "end_combat")


def test_r13_turn_expiry_hold_holds_the_turn(daemon: Daemon, gm: Client) -> None:
    _setup(gm, "expiry-hold", turn_time_limit=1.0, turn_warning=0.0, turn_expiry="hold")
    watcher = _watch(daemon, "expiry-hold")
    _do(gm, "expiry-hold", "start_combat")
    events = _until(watcher, "turn_started")  # ann's, from start_combat
    events = _until(watcher, "turn_started")  # bob's, after ann's turn was held by the clock
    by_name = {e["event"]: e for e in events}
    assert "turn_timer_warning" not in by_name  # a warning of 0 s is no warning
    assert by_name["turn_timer_expired"]["action"] == "hold"
    assert by_name["turn_held"]["combatant"] == "ann"
    assert by_name["turn_started"]["combatant"] == "bob"
    assert [
        h["combatant"] for h in gm.call("get_combat", combat="expiry-hold")["view"]["holds"]
    ] == ["ann"]
    _do(gm, "expiry-hold", "end_combat")


def test_r13_window_closes_by_itself_at_its_deadline(daemon: Daemon, gm: Client) -> None:
    _setup(gm, "window", window_deadline=1.0)
    _do(gm, "window", "start_combat")
    watcher = _watch(daemon, "window")
    announced = _do(gm, "window", "announce_trigger", facts={"event": "explosion"}, offer=["bob"])
    (opened,) = [e for e in announced["events"] if e["event"] == "window_opened"]
    window = opened["window"]
    assert window["deadline"] == pytest.approx(window["opened_at"] + 1.0)

    events = _until(watcher, "window_closed")
    closed = events[-1]
    assert (closed["window"], closed["reason"]) == (window["id"], "deadline")
    assert _tick_before(events, "window_closed")["at"] >= window["deadline"]
    view = gm.call("get_combat", combat="window")["view"]
    assert view["window"] is None
    assert view["turn"]["combatant"] == "ann"  # the interrupted turn goes on
    _do(gm, "window", "end_combat")


def test_r13_a_restart_keeps_the_turn_deadline_it_does_not_reset_it(tmp_path: Path) -> None:
    limit = 3.0
    with running(tmp_path) as d:
        with d.client() as gm:
            _setup(gm, "kept", turn_time_limit=limit, turn_warning=0.0)
            started = _do(gm, "kept", "start_combat")
        (turn,) = [e for e in started["events"] if e["event"] == "turn_started"]
        deadline = turn["deadline"]
        seq = started["seq"]
        d.kill()
        # Restart a third of the way in: were the timer restarted, it would expire a whole
        # limit after this restart, not at the deadline written before the kill.
        time.sleep(max(0.0, deadline - limit / 3 * 2 - time.time()))
        d.start()
        with d.client() as gm:
            if time.time() < deadline - 0.2:
                current = _turn(gm, "kept")
                assert (current["combatant"], current["deadline"]) == ("ann", deadline)
            watcher = _watch(d, "kept", after=seq)
            events = _until(watcher, "turn_timer_expired")
            at = _tick_before(events, "turn_timer_expired")["at"]
            assert deadline <= at < deadline + limit / 3


def test_r13_a_deadline_that_passed_while_the_daemon_was_down_applies_at_start(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        with d.client() as gm:
            _setup(gm, "overdue", turn_time_limit=1.0, turn_warning=0.0)
            started = _do(gm, "overdue", "start_combat")
        (turn,) = [e for e in started["events"] if e["event"] == "turn_started"]
        d.kill()
        time.sleep(max(0.0, turn["deadline"] + 0.5 - time.time()))
        d.start()
        restarted = time.time()
        watcher = _watch(d, "overdue", after=started["seq"])
        events = _until(watcher, "turn_started")
        expired = next(e for e in events if e["event"] == "turn_timer_expired")
        assert (expired["combatant"], expired["action"]) == ("ann", "end_turn")
        at = _tick_before(events, "turn_timer_expired")["at"]
        assert turn["deadline"] < at < restarted + PROMPT
        assert events[-1]["combatant"] == "bob"
        # bob's timer starts when bob's turn does, after the restart.
        assert events[-1]["deadline"] == pytest.approx(at + 1.0)


def test_r13_a_window_deadline_survives_sigkill_and_closes_at_start(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        with d.client() as gm:
            _setup(gm, "overdue-window", window_deadline=1.0)
            _do(gm, "overdue-window", "start_combat")
            announced = _do(
                gm,
                "overdue-window",
                "announce_trigger",
                facts={"event": "explosion"},
                offer=["bob"],
            )
        (opened,) = [e for e in announced["events"] if e["event"] == "window_opened"]
        window = opened["window"]
        d.kill()
        time.sleep(max(0.0, window["deadline"] + 0.5 - time.time()))
        d.start()
        restarted = time.time()
        watcher = _watch(d, "overdue-window", after=announced["seq"])
        events = _until(watcher, "window_closed")
        assert (events[-1]["window"], events[-1]["reason"]) == (window["id"], "deadline")
        at = _tick_before(events, "window_closed")["at"]
        assert window["deadline"] < at < restarted + PROMPT
        with d.client() as gm:
            assert gm.call("get_combat", combat="overdue-window")["view"]["window"] is None


@pytest.mark.parametrize("limit", [0, 0.0, 0.5, -1.0])
def test_r13_a_turn_time_limit_under_a_second_is_refused_and_changes_nothing(
    gm: Client, limit: float
) -> None:
    combat = f"spin-{next(_ids)}"
    with pytest.raises(CallError) as refused:
        _setup(gm, combat, turn_time_limit=limit)
    assert (refused.value.code, refused.value.field) == (
        "invalid_option",
        "options.turn_time_limit",
    )
    assert combat not in [c["combat"] for c in gm.call("list_combats")]


def test_r13_the_shortest_turn_time_limit_is_one_second(gm: Client) -> None:
    _setup(gm, "one-second", turn_time_limit=1.0, window_deadline=0.0, turn_warning=0.0)
    _do(gm, "one-second", "end_combat")


RUNAWAY_SECONDS = 3.0
"""How long the clock-runaway test lets a combat with deadlines always due run."""


def _rewrite_turn_limit(data_dir: Path, combat: str, limit: float) -> None:
    """Make ``combat``'s recorded options say ``turn_time_limit: limit``, as a daemon from
    before the 1 s minimum could have recorded them."""
    db = sqlite3.connect(data_dir / "turnkeeper.db")
    with db:
        (body,) = db.execute(
            "SELECT body FROM events WHERE combat_id = ? AND seq = 2", (combat,)
        ).fetchone()
        created = msgpack.unpackb(body, raw=False)
        assert created["event"] == "combat_created"
        created["options"] = [
            [k, limit if k == "turn_time_limit" else v] for k, v in created["options"]
        ]
        db.execute(
            "UPDATE events SET body = ? WHERE combat_id = ? AND seq = 2",
            (msgpack.packb(created, use_bin_type=True), combat),
        )
        db.execute("DELETE FROM snapshots WHERE combat_id = ?", (combat,))
    db.close()


def test_r13_the_clock_caps_the_events_of_a_combat_whose_deadlines_are_always_due(
    tmp_path: Path,
) -> None:
    # A turn limit of 0, recorded before the minimum: every turn expires as it starts. The
    # clock defers each tick by what the last one recorded, never dropping a deadline.
    d = Daemon(tmp_path).start()
    try:
        gm = d.client()
        _setup(gm, "runaway", turn_time_limit=1.0)
        _do(gm, "runaway", "start_combat")
        gm.close()
        assert d.stop() == 0
        _rewrite_turn_limit(d.data_dir, "runaway", 0.0)
        began = time.monotonic()
        d.start()
        gm = d.client()
        first = int(gm.call("get_combat", combat="runaway")["seq"])
        while time.monotonic() - began < RUNAWAY_SECONDS:
            time.sleep(0.2)
        seq = int(gm.call("get_combat", combat="runaway")["seq"])
        ran = time.monotonic() - began
        budget = MAX_CLOCK_EVENTS_PER_SECOND * ran + 2 * TICK_EVENTS
        assert seq - first <= budget, f"{seq - first} events in {ran:.1f} s"
        assert seq - first >= TICK_EVENTS  # deferred, not dropped: the turns still go round
        expired = [
            e
            for e in gm.call("history", combat="runaway", after=first)["events"]
            if e["event"] == "turn_timer_expired"
        ]
        assert len(expired) >= 2
        gm.close()
    finally:
        d.kill()


TICK_EVENTS = 6
"""Most events one expiry tick of the runaway test records (command, expiry, turn ended, round
ended and started, turn started)."""
