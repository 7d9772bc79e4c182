"""R13 ``set_turn_timer`` end to end: a real daemon over its socket, its own clock firing the
new length from the next turn, undo, a subscriber seeing the change, a SIGKILL and restart
replaying it from the log, and a daemon following the combat on a shared PostgreSQL store.
Timers are the shortest allowed (1 s) so the tests stay fast."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import CallError, Client, Daemon, running, stop_all, two_daemons
from test_daemon_clock import _do, _setup, _tick_before, _turn, _until, _watch

QUIET = 1.5
"""How long a turn whose timer was turned off is watched for an expiry that must not come: past
the 1 s deadline it started with, with the clock's own slack."""


def _options(gm: Client, combat: str) -> dict[str, Any]:
    return dict(gm.call("get_combat", combat=combat)["view"]["options"])


def _ref(gm: Client, combat: str) -> dict[str, Any]:
    """The current turn as a ``TurnRef``."""
    turn = _turn(gm, combat)
    return {"round": turn["round"], "combatant": turn["combatant"], "number": turn["number"]}


def _started(result: dict[str, Any]) -> dict[str, Any]:
    (started,) = [e for e in result["events"] if e["event"] == "turn_started"]
    return started


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("turn-timer")) as d:
        yield d


@pytest.fixture
def gm(daemon: Daemon) -> Iterator[Client]:
    c = daemon.client()
    yield c
    c.close()


def test_r13_wire_a_shorter_turn_timer_fires_from_the_next_turn_not_the_running_one(
    daemon: Daemon, gm: Client
) -> None:
    _setup(gm, "shorter", turn_time_limit=600.0)
    ann = _started(_do(gm, "shorter", "start_combat"))
    watcher = _watch(daemon, "shorter")

    set_ = _do(gm, "shorter", "set_turn_timer", seconds=1)
    assert [e["event"] for e in set_["events"]] == ["command_recorded", "turn_timer_set"]
    assert set_["events"][1]["seconds"] == 1
    assert _options(gm, "shorter")["turn_time_limit"] == 1.0
    # ann's turn keeps the 10 minutes it started with: no surprise expiry.
    assert _turn(gm, "shorter")["deadline"] == ann["deadline"]
    seen = _until(watcher, "turn_timer_set")  # subscribers see the change as an event
    assert seen[-1]["seconds"] == 1

    bob = _started(_do(gm, "shorter", "end_turn", turn=_ref(gm, "shorter")))
    assert bob["combatant"] == "bob"
    assert bob["deadline"] == pytest.approx(bob["at"] + 1.0)
    # No client says a word from here on: the daemon's clock ends bob's turn at the new length.
    events = _until(watcher, "turn_timer_expired")
    assert events[-1]["combatant"] == "bob"
    assert _tick_before(events, "turn_timer_expired")["at"] >= bob["deadline"]
    events = _until(watcher, "turn_started")
    assert (events[-1]["combatant"], events[-1]["round"]) == ("ann", 2)
    assert events[-1]["deadline"] == pytest.approx(events[-1]["at"] + 1.0)
    _do(gm, "shorter", "end_combat")


def test_r13_wire_turning_the_timer_off_stops_the_running_turn_and_undo_restarts_it(
    daemon: Daemon, gm: Client
) -> None:
    _setup(gm, "off", turn_time_limit=1.0, turn_warning=0.0)
    ann = _started(_do(gm, "off", "start_combat"))
    off = _do(gm, "off", "set_turn_timer", seconds=None)
    assert off["events"][1] == {"seq": off["seq"], "event": "turn_timer_set", "seconds": None}
    turn = _turn(gm, "off")
    assert (turn["deadline"], turn["warn_at"]) == (None, None)
    assert _options(gm, "off")["turn_time_limit"] is None

    # Past the deadline ann's turn started with, the clock has nothing to do.
    time.sleep(max(0.0, ann["deadline"] + QUIET - time.time()))
    combat = gm.call("get_combat", combat="off")
    assert (combat["seq"], combat["view"]["turn"]["combatant"]) == (off["seq"], "ann")

    # Undo brings the deadline back, passed by now: the clock expires ann's turn at once.
    watcher = _watch(daemon, "off")
    undone = _do(gm, "off", "undo")
    assert undone["events"][1]["command"] == "set_turn_timer"
    assert _turn(gm, "off")["deadline"] == ann["deadline"]
    events = _until(watcher, "turn_timer_expired")
    assert events[-1]["combatant"] == "ann"
    _do(gm, "off", "end_combat")


def test_r13_wire_a_bad_turn_timer_is_refused_with_its_field_and_changes_nothing(
    gm: Client,
) -> None:
    _setup(gm, "bad", turn_time_limit=60.0)
    seq = gm.call("get_combat", combat="bad")["seq"]
    for params, code in (
        ({"seconds": 0}, "invalid_value"),
        ({"seconds": 86_401}, "invalid_value"),
        ({"seconds": 1.5}, "invalid_params"),
        ({"seconds": "30"}, "invalid_params"),
        ({"seconds": True}, "invalid_params"),
        ({}, "invalid_params"),  # nil must be said: a forgotten field never turns timing off
    ):
        with pytest.raises(CallError) as refused:
            _do(gm, "bad", "set_turn_timer", **params)
        assert (refused.value.code, refused.value.field) == (code, "seconds"), params
    assert gm.call("get_combat", combat="bad")["seq"] == seq
    assert _options(gm, "bad")["turn_time_limit"] == 60.0


def test_r13_wire_a_turn_timer_set_survives_sigkill_and_times_the_next_turn(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        with d.client() as gm:
            _setup(gm, "kept", turn_time_limit=600.0)
            ann = _started(_do(gm, "kept", "start_combat"))
            _do(gm, "kept", "set_turn_timer", seconds=1)
        d.kill()
        d.start()
        with d.client() as gm:
            # Replayed from the log: the new length, and ann's deadline as it was.
            assert _options(gm, "kept")["turn_time_limit"] == 1.0
            assert _turn(gm, "kept")["deadline"] == ann["deadline"]
            watcher = _watch(d, "kept")
            bob = _started(_do(gm, "kept", "end_turn", turn=_ref(gm, "kept")))
            assert bob["deadline"] == pytest.approx(bob["at"] + 1.0)
            events = _until(watcher, "turn_timer_expired")
            assert events[-1]["combatant"] == "bob"


def test_r13_wire_a_turn_timer_set_reaches_a_player_following_on_another_daemon(
    tmp_path: Path, postgres_db: str
) -> None:
    a, b = two_daemons(tmp_path, postgres_db, tcp=True)
    try:
        with a.client() as at_a:
            _setup(at_a, "followed", turn_time_limit=600.0)
            seq = _do(at_a, "followed", "start_combat")["seq"]
            assert b.tcp_port is not None
            player = Client.tcp(b.tcp_port)
            player.hello(b.token("player", "--user", "u1"))
            player.call("subscribe", combat="followed", after=seq)
            _do(at_a, "followed", "set_turn_timer", seconds=30)
            seen = _until(player, "turn_timer_set")
            assert seen[-1]["seconds"] == 30
            # B folds the log as A wrote it: the player's view has the new length.
            view = player.call("get_combat", combat="followed")["view"]
            assert dict(view["options"])["turn_time_limit"] == 30.0
            player.close()
    finally:
        stop_all(a, b)
