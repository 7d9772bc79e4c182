"""R13 The combat clock: time is passed in, turn timers fire on ticks, and condition durations
count turn boundaries of a named combatant."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

import turnkeeper_engine
from story import Story, names, of
from turnkeeper_engine import (
    BUNDLED_RULES,
    Actor,
    Engine,
    RuleError,
    SeededDice,
    State,
    decide,
    fold,
    next_deadline,
)
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.views import view, visible

ENGINE_SOURCE = Path(turnkeeper_engine.__file__).parent


def dnd_story(**options: object) -> Story:
    """Three combatants in a fixed dnd3e order: a (20), b (10), c (5); round 1 not started."""
    s = Story("dnd3e", **options)
    for cid, face in (("a", 20), ("b", 10), ("c", 5)):
        s.add(cid)
        s.roll(cid, face)
    return s


def marvel_story(**options: object) -> Story:
    """marvel, no Fantastic: a (18) then b (6)."""
    s = Story("marvel", **options)
    s.add("a")
    s.roll("a", 6, 6, 6)
    s.add("b")
    s.roll("b", 2, 2, 2)
    return s


# ------------------------------------------------------------------------ time is passed in


def test_r13_engine_imports_no_clock() -> None:
    for path in ENGINE_SOURCE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not {"time", "datetime"} & set(modules), f"{path.name} imports a clock"


def test_r13_engine_never_reads_a_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_clock() -> float:
        raise AssertionError("the engine read the clock")

    for name in ("time", "monotonic", "perf_counter", "time_ns", "monotonic_ns"):
        monkeypatch.setattr(time, name, no_clock)
    s = dnd_story(turn_time_limit=30.0, turn_warning=5.0)
    s.do(c.StartCombat(), now=100.0)
    s.do(c.Tick(), now=126.0)
    s.do(c.Tick(), now=131.0)
    assert s.state.turn is not None
    assert s.current == "b"


def test_r13_turn_started_at_is_the_time_given() -> None:
    s = dnd_story()
    events = s.do(c.StartCombat(), now=1234.5)
    (started,) = of(events, ev.TurnStarted)
    assert started.at == 1234.5
    assert all(e.at == 1234.5 for e in of(events, ev.CommandRecorded))
    assert s.state.turn is not None
    assert s.state.turn.started_at == 1234.5
    events = s.do(c.EndTurn(s.turn), now=2000.25)
    (started,) = of(events, ev.TurnStarted)
    assert (started.combatant, started.at) == ("b", 2000.25)


def test_r13_same_command_at_different_times_differs_only_in_time() -> None:
    s = dnd_story()
    state = s.state
    early = turnkeeper_engine.decide(
        state, c.StartCombat(), 10.0, dice=SeededDice(0), rules=BUNDLED_RULES
    )
    late = turnkeeper_engine.decide(
        state, c.StartCombat(), 99.0, dice=SeededDice(0), rules=BUNDLED_RULES
    )
    assert isinstance(early, list)
    assert isinstance(late, list)
    assert [e.name for e in early] == [e.name for e in late]
    assert of(early, ev.TurnStarted)[0].at == 10.0
    assert of(late, ev.TurnStarted)[0].at == 99.0


# -------------------------------------------------------------------------------- turn timer


def test_r13_no_time_limit_no_deadline() -> None:
    s = dnd_story()
    s.do(c.StartCombat(), now=0.0)
    assert s.state.turn is not None
    assert s.state.turn.deadline is None
    assert s.do(c.Tick(), now=1e9) == []
    assert s.current == "a"


def test_r13_deadline_is_start_plus_limit_as_absolute_time() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    events = s.do(c.StartCombat(), now=1000.0)
    (started,) = of(events, ev.TurnStarted)
    assert (started.deadline, started.warn_at) == (1060.0, 1050.0)
    turn = s.state.turn
    assert turn is not None
    assert (turn.deadline, turn.warn_at) == (1060.0, 1050.0)
    # The next turn's deadline counts from when that turn started, not from the combat's start.
    s.do(c.EndTurn(s.turn), now=1003.0)
    turn = s.state.turn
    assert turn is not None
    assert (turn.combatant, turn.deadline, turn.warn_at) == ("b", 1063.0, 1053.0)


def test_r13_tick_before_warning_does_nothing_at_all() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    before = s.state
    result = s.engine.handle(c.Tick(), 1049.999)
    assert result == []  # not even command_recorded
    assert s.state == before


def test_r13_tick_that_does_nothing_is_not_undoable() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    s.do(c.Tick(), now=1001.0)
    events = s.do(c.Undo(), now=1002.0)
    assert of(events, ev.CommandUndone)[0].command == "start_combat"


def test_r13_warning_at_warn_at_exactly_once() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    events = s.do(c.Tick(), now=1050.0)
    assert names(events) == ["turn_timer_warning"]
    (warning,) = of(events, ev.TurnTimerWarning)
    assert (warning.combatant, warning.round, warning.deadline) == ("a", 1, 1060.0)
    assert s.state.turn is not None
    assert s.state.turn.warned
    assert s.do(c.Tick(), now=1055.0) == []
    assert s.do(c.Tick(), now=1059.9) == []
    assert s.current == "a"


def test_r13_expiry_end_turn_ends_the_turn() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0, turn_expiry="end_turn")
    s.do(c.StartCombat(), now=1000.0)
    s.do(c.Tick(), now=1050.0)
    events = s.do(c.Tick(), now=1060.0)
    assert names(events)[:2] == ["turn_timer_expired", "turn_ended"]
    (expired,) = of(events, ev.TurnTimerExpired)
    assert (expired.combatant, expired.round, expired.action) == ("a", 1, "end_turn")
    (ended,) = of(events, ev.TurnEnded)
    assert (ended.combatant, ended.round) == ("a", 1)
    (started,) = of(events, ev.TurnStarted)
    assert (started.combatant, started.at, started.deadline) == ("b", 1060.0, 1120.0)
    assert not of(events, ev.TurnTimerWarning)  # the warning came once, earlier


def test_r13_late_tick_warns_then_expires() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    events = s.do(c.Tick(), now=5000.0)
    got = names(events)
    assert got.count("turn_timer_expired") == 1
    assert got.count("turn_ended") == 1
    assert got.index("turn_timer_warning") < got.index("turn_timer_expired")
    assert s.current == "b"


def test_r13_expiry_ends_the_turn_after_an_action() -> None:
    s = dnd_story(turn_time_limit=30.0, turn_warning=5.0)
    s.do(c.StartCombat(), now=0.0)
    s.do(c.DeclareAction(s.turn, c.ActionSpec("move")), now=3.0)
    events = s.do(c.Tick(), now=30.0)
    assert of(events, ev.TurnTimerExpired)[0].action == "end_turn"
    assert s.current == "b"


def test_r13_expiry_hold_holds_the_turn() -> None:
    s = marvel_story(turn_time_limit=30.0, turn_warning=5.0, turn_expiry="hold")
    s.do(c.StartCombat(), now=0.0)
    events = s.do(c.Tick(), now=30.0)
    assert names(events)[:3] == ["turn_timer_warning", "turn_timer_expired", "turn_held"]
    (expired,) = of(events, ev.TurnTimerExpired)
    assert (expired.combatant, expired.action) == ("a", "hold")
    assert not of(events, ev.TurnEnded)
    hold = s.state.hold_of("a")
    assert hold is not None
    assert hold.number is None
    assert s.current == "b"


def test_r13_expiry_hold_ends_instead_when_an_action_was_taken() -> None:
    s = marvel_story(turn_time_limit=30.0, turn_warning=5.0, turn_expiry="hold")
    s.do(c.StartCombat(), now=0.0)
    s.do(c.DeclareAction(s.turn, c.ActionSpec("move")), now=1.0)
    events = s.do(c.Tick(), now=31.0)
    (expired,) = of(events, ev.TurnTimerExpired)
    assert expired.action == "end_turn"
    assert not of(events, ev.TurnHeld)
    assert [e.combatant for e in of(events, ev.TurnEnded)] == ["a"]
    assert s.state.hold_of("a") is None
    assert s.current == "b"


def test_r13_expiry_hold_dnd3e_delays() -> None:
    s = dnd_story(turn_time_limit=30.0, turn_expiry="hold")
    s.do(c.StartCombat(), now=0.0)
    events = s.do(c.Tick(), now=30.0)
    assert of(events, ev.TurnTimerExpired)[0].action == "hold"
    assert [e.combatant for e in of(events, ev.TurnHeld)] == ["a"]
    assert s.current == "b"


def test_r13_timer_does_not_fire_while_a_window_is_open() -> None:
    s = dnd_story(turn_time_limit=30.0, turn_warning=5.0, window_deadline=100.0)
    s.do(c.StartCombat(), now=0.0)
    s.do(c.AnnounceTrigger(c.TriggerFacts("shout", "a"), offer=("b",)), now=1.0)
    assert s.state.window is not None
    assert s.do(c.Tick(), now=40.0) == []
    assert s.current == "a"
    # At the window's deadline it closes, and the overdue turn timer fires in the same tick.
    events = s.do(c.Tick(), now=101.0)
    got = names(events)
    assert got.index("window_closed") < got.index("turn_timer_expired")
    assert s.current == "b"


def test_r13_deadline_survives_a_restart() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    restored = fold(s.log)
    assert restored == s.state
    turn = restored.turn
    assert turn is not None
    assert (turn.deadline, turn.warn_at) == (1060.0, 1050.0)
    engine = Engine(s.dice, restored, rules=BUNDLED_RULES)
    result = engine.handle(c.Tick(), 1060.0)
    assert isinstance(result, list)
    assert [e.name for e in result][:3] == [
        "command_recorded",
        "turn_timer_warning",
        "turn_timer_expired",
    ]
    assert engine.state.turn is not None
    assert engine.state.turn.combatant == "b"


def test_r13_tick_is_narrator_only() -> None:
    s = dnd_story(turn_time_limit=60.0)
    s.do(c.StartCombat(), now=0.0)
    error = s.refuse(c.Tick(), turnkeeper_engine.Actor("player", "u1"))
    assert (error.code, error.field) == ("forbidden", "actor")


# ---------------------------------------------------------------------- condition durations


def conditions_of(s: Story) -> list[str]:
    return [k.id for k in s.state.conditions]


def expiries(events: list[ev.Event]) -> list[str]:
    return [e.condition for e in of(events, ev.ConditionExpired)]


def test_r13_until_end_of_sources_next_turn() -> None:
    s = dnd_story()
    s.do(c.StartCombat())
    assert s.current == "a"
    # Applied in a's turn by c: lasts until the end of c's next turn (this round's).
    events = s.do(c.ApplyCondition("b", "custom", source="c"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    (applied,) = of(events, ev.ConditionApplied)
    assert applied.condition.clocks[0].anchor == "c"  # the applier is the default anchor
    assert expiries(s.end_turn()) == []  # a ends
    assert expiries(s.end_turn()) == []  # b ends
    assert s.current == "c"
    assert cond_id in conditions_of(s)
    events = s.end_turn()  # c ends
    assert expiries(events) == [cond_id]
    assert names(events).index("condition_expired") > names(events).index("turn_ended")
    assert cond_id not in conditions_of(s)


def test_r13_applied_during_anchors_own_turn_current_end_does_not_count() -> None:
    s = dnd_story()
    s.do(c.StartCombat())
    s.end_turn()
    assert s.current == "b"
    events = s.do(c.ApplyCondition("c", "custom", source="b"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    assert expiries(s.end_turn()) == []  # the end of b's current turn does not count
    assert expiries(s.end_turn()) == []  # c
    assert expiries(s.end_turn()) == []  # a, round 2
    assert s.current == "b"
    assert s.state.round == 2
    assert cond_id in conditions_of(s)
    assert expiries(s.end_turn()) == [cond_id]  # the end of b's next turn


def test_r13_two_rounds_span_two_turns_of_the_anchor() -> None:
    s = dnd_story()
    s.do(c.StartCombat())
    events = s.do(c.ApplyCondition("a", "custom", rounds=2, source="b"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    ends = []
    for _ in range(9):
        ended = s.current, s.state.round
        if expiries(s.end_turn()):
            ends.append(ended)
    assert ends == [("b", 2)]
    assert cond_id not in conditions_of(s)


def test_r13_two_rounds_applied_in_anchors_own_turn() -> None:
    s = dnd_story()
    s.do(c.StartCombat())
    s.end_turn()
    assert s.current == "b"
    s.do(c.ApplyCondition("a", "custom", rounds=2, source="b"))
    ends = []
    for _ in range(12):
        ended = s.current, s.state.round
        if expiries(s.end_turn()):
            ends.append(ended)
    assert ends == [("b", 3)]


def test_r13_start_boundary_ends_at_the_start_of_anchors_next_turn() -> None:
    s = dnd_story()
    s.do(c.StartCombat())
    s.end_turn()
    assert s.current == "b"
    events = s.do(c.ApplyCondition("a", "custom", boundary="start", source="b"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    assert expiries(s.end_turn()) == []  # b ends, c starts
    assert expiries(s.end_turn()) == []  # c ends, a starts
    events = s.end_turn()  # a ends, b starts
    assert s.current == "b"
    assert expiries(events) == [cond_id]
    assert names(events).index("condition_expired") < names(events).index("turn_started")


def test_r13_named_anchor_other_than_the_source() -> None:
    s = dnd_story()
    s.do(c.StartCombat())
    events = s.do(c.ApplyCondition("a", "custom", source="b", anchor="a"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    assert of(events, ev.ConditionApplied)[0].condition.clocks[0].anchor == "a"
    # a's current turn does not count; it ends at the end of a's turn in round 2.
    ends = []
    for _ in range(6):
        ended = s.current, s.state.round
        if cond_id in expiries(s.end_turn()):
            ends.append(ended)
    assert ends == [("a", 2)]


def test_r13_marvel_self_applied_ends_at_end_of_own_next_turn() -> None:
    s = marvel_story()
    s.do(c.StartCombat())
    assert s.current == "a"
    events = s.do(c.ApplyCondition("b", "custom", source="b"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    s.end_turn()  # a ends; b's turn starts
    assert s.current == "b"
    events = s.end_turn()
    assert expiries(events) == [cond_id]


def test_r13_a_held_turn_later_in_the_round_is_not_a_second_turn_start() -> None:
    s = marvel_story()
    s.add("z")
    s.roll("z", 1, 1, 2)  # z (4) acts last
    s.do(c.StartCombat())
    events = s.do(c.ApplyCondition("b", "custom", rounds=2, boundary="start", anchor="a"))
    (cond_id,) = [e.condition.id for e in of(events, ev.ConditionApplied)]
    s.end_turn()
    s.end_turn()
    assert expiries(s.end_turn()) == []  # round 2: a's turn starts, one of two
    s.do(c.Hold(s.turn))
    s.do(c.TakeHeldTurn("a", "after", "b"))
    assert expiries(s.end_turn()) == []  # b ends: a's held turn is the same round's turn
    assert s.current == "a"
    s.end_turn()
    s.end_turn()
    assert expiries(s.end_turn()) == [cond_id]  # round 3: the second start


@pytest.mark.parametrize("limit", [0, 0.0, 0.999, -1.0, 86_400.5])
def test_r13_a_turn_time_limit_outside_one_second_to_a_day_is_refused(limit: float) -> None:
    created = decide(
        State(),
        c.CreateCombat("x", "dnd3e", (("turn_time_limit", limit),)),
        0.0,
        dice=SeededDice(0),
        rules=BUNDLED_RULES,
    )
    assert isinstance(created, RuleError)
    assert (created.code, created.field) == ("invalid_option", "options.turn_time_limit")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("turn_time_limit", 1.0),
        ("turn_time_limit", 1),
        ("turn_time_limit", None),
        ("window_deadline", 0.0),
        ("window_deadline", 0.05),
        ("turn_warning", 0.0),
    ],
)
def test_r13_time_options_from_their_minimum_are_accepted(name: str, value: float) -> None:
    created = decide(
        State(),
        c.CreateCombat("x", "dnd3e", ((name, value),)),
        0.0,
        dice=SeededDice(0),
        rules=BUNDLED_RULES,
    )
    assert not isinstance(created, RuleError), created


# ------------------------------------------------------------ the timer changed mid-combat
# The rulings are silent on when a new length takes effect; the project's decision is in
# docs/rules.md (R13): from the next turn that starts, and turning the timer off stops the
# running turn's timer too.


def test_r13_a_new_turn_timer_applies_from_the_next_turn_the_running_one_keeps_its_deadline() -> (
    None
):
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    events = s.do(c.SetTurnTimer(20), now=1005.0)
    assert names(events) == ["turn_timer_set"]
    assert of(events, ev.TurnTimerSet)[0].seconds == 20
    assert s.state.option("turn_time_limit") == 20.0
    turn = s.state.turn
    assert turn is not None
    assert (turn.combatant, turn.deadline, turn.warn_at) == ("a", 1060.0, 1050.0)
    assert s.do(c.Tick(), now=1030.0) == []  # the shorter length is not a's
    events = s.do(c.EndTurn(s.turn), now=1040.0)
    (started,) = of(events, ev.TurnStarted)
    assert (started.combatant, started.deadline, started.warn_at) == ("b", 1060.0, 1050.0)
    events = s.do(c.Tick(), now=1060.0)
    assert [e.combatant for e in of(events, ev.TurnTimerExpired)] == ["b"]
    assert s.current == "c"


def test_r13_a_longer_turn_timer_does_not_lengthen_the_running_turn() -> None:
    s = dnd_story(turn_time_limit=30.0, turn_warning=0.0)
    s.do(c.StartCombat(), now=0.0)
    s.do(c.SetTurnTimer(600), now=1.0)
    events = s.do(c.Tick(), now=30.0)
    assert of(events, ev.TurnTimerExpired)[0].combatant == "a"
    (started,) = of(events, ev.TurnStarted)
    assert (started.combatant, started.deadline) == ("b", 630.0)


def test_r13_turning_the_timer_off_stops_the_running_turns_timer_too() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    s.do(c.SetTurnTimer(None), now=1001.0)
    turn = s.state.turn
    assert turn is not None
    assert (turn.deadline, turn.warn_at) == (None, None)
    assert s.state.option("turn_time_limit") is None
    assert next_deadline(s.state) is None
    assert s.do(c.Tick(), now=9999.0) == []
    events = s.do(c.EndTurn(s.turn), now=10_000.0)
    (started,) = of(events, ev.TurnStarted)
    assert (started.deadline, started.warn_at) == (None, None)


def test_r13_a_timer_set_where_there_was_none_starts_with_the_next_turn() -> None:
    s = dnd_story()
    s.do(c.StartCombat(), now=0.0)
    s.do(c.SetTurnTimer(45), now=5.0)
    assert s.state.turn is not None
    assert s.state.turn.deadline is None
    events = s.do(c.EndTurn(s.turn), now=10.0)
    (started,) = of(events, ev.TurnStarted)
    # The combat's warning (10 s by default) applies to the new length as to any other.
    assert (started.deadline, started.warn_at) == (55.0, 45.0)


def test_r13_the_turn_timer_can_be_set_before_the_combat_starts() -> None:
    s = dnd_story()
    s.do(c.SetTurnTimer(1))
    events = s.do(c.StartCombat(), now=100.0)
    (started,) = of(events, ev.TurnStarted)
    assert started.deadline == 101.0


@pytest.mark.parametrize("seconds", [0, -5, 86_401, 10**12, True, 1.5])
def test_r13_a_turn_timer_outside_one_second_to_a_day_is_refused_and_changes_nothing(
    seconds: object,
) -> None:
    s = dnd_story(turn_time_limit=60.0)
    s.do(c.StartCombat(), now=0.0)
    error = s.refuse(c.SetTurnTimer(seconds))  # type: ignore[arg-type]
    assert (error.code, error.field) == ("invalid_value", "seconds")


@pytest.mark.parametrize("seconds", [1, 86_400])
def test_r13_a_turn_timer_from_one_second_to_a_day_is_accepted(seconds: int) -> None:
    s = dnd_story()
    s.do(c.SetTurnTimer(seconds))
    assert s.state.option("turn_time_limit") == float(seconds)


def test_r13_setting_the_turn_timer_is_undone_with_the_running_turns_deadline() -> None:
    s = dnd_story(turn_time_limit=60.0, turn_warning=10.0)
    s.do(c.StartCombat(), now=1000.0)
    before = s.state
    s.do(c.SetTurnTimer(None), now=1001.0)
    events = s.do(c.Undo(), now=1002.0)
    assert of(events, ev.CommandUndone)[0].command == "set_turn_timer"
    assert s.state == before
    assert s.state.turn is not None
    assert s.state.turn.deadline == 1060.0


def test_r13_a_turn_timer_set_replays_from_the_log() -> None:
    s = dnd_story(turn_time_limit=60.0)
    s.do(c.StartCombat(), now=0.0)
    s.do(c.SetTurnTimer(15), now=1.0)
    s.do(c.EndTurn(s.turn), now=2.0)
    s.do(c.SetTurnTimer(None), now=3.0)
    assert fold(s.log) == s.state
    assert s.state.option("turn_time_limit") is None


def test_r13_only_the_narrator_sets_the_turn_timer() -> None:
    s = Story("dnd3e")
    s.add("a", controller="u1")
    s.roll("a", 20)
    s.do(c.StartCombat(), now=0.0)
    error = s.refuse(c.SetTurnTimer(30), Actor("player", "u1"))
    assert (error.code, error.field) == ("forbidden", "actor")


def test_r13_every_role_sees_the_turn_timer_and_its_change() -> None:
    s = Story("dnd3e", turn_time_limit=60.0)
    # A hidden combatant named like an option: the option is no mention of it (R16).
    s.add("turn_time_limit", hidden=True)
    s.add("a", controller="u1")
    events = s.do(c.SetTurnTimer(30))
    for actor in (Actor("player", "u1"), Actor("observer")):
        seen = view(s.state, actor)
        assert seen.options == s.state.options
        assert dict(seen.options)["turn_time_limit"] == 30.0
        assert [c.id for c in seen.combatants] == ["a"]
        assert visible(events[-1], s.state, actor) == events[-1]
