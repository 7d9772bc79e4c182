"""R9 Holding a turn (marvel) and Delay (dnd3e)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from daemon import CallError, Client, running
from story import Story, names, of
from turnkeeper_engine import BUNDLED_RULES, NARRATOR, RuleError, SeededDice, View, decide, view
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.evolve import evolve
from turnkeeper_engine.model import ActionSpec, TurnRef
from turnkeeper_engine.plain import event_from_plain

NUMBERS = {"ana": 15, "ben": 12, "cal": 9, "dan": 6}
"""Everyone's initiative check; in both rulesets the order is Ana, Ben, Cal, Dan."""

BOTH = pytest.mark.parametrize("ruleset", ["marvel", "dnd3e"])


def d616_faces(total: int) -> tuple[int, int, int]:
    """Three d6 (no M, so not Fantastic) adding up to ``total``."""
    marvel_die = max(2, min(6, total - 2))
    first = min(6, total - marvel_die - 1)
    second = total - marvel_die - first
    assert 1 <= second <= 6
    return (first, second, marvel_die)


def fight(
    ruleset: str,
    who: tuple[str, ...] = ("ana", "ben", "cal"),
    mods: dict[str, int] | None = None,
    dex: dict[str, int] | None = None,
    numbers: dict[str, int] | None = None,
    **options: object,
) -> Story:
    """A combat at ``NUMBERS`` (or ``numbers``) whatever the initiative modifiers: round 1 has
    started with the first combatant's turn."""
    story = Story(ruleset, **options)
    checks = {**NUMBERS, **(numbers or {})}
    for cid in who:
        mod = (mods or {}).get(cid, 0)
        story.add(cid, init_mod=mod, dexterity=(dex or {}).get(cid, 10))
        total = checks[cid] - mod
        story.roll(cid, *(d616_faces(total) if ruleset == "marvel" else (total,)))
    story.do(c.StartCombat())
    assert story.state.round == 1
    return story


def hold(story: Story, number: int | None = None) -> list[ev.Event]:
    return story.do(c.Hold(story.turn, number))


def take(story: Story, who: str, when: str, other: str) -> list[ev.Event]:
    return story.do(c.TakeHeldTurn(who, when, other))  # type: ignore[arg-type]


def turn_starts(events: list[ev.Event]) -> list[tuple[str, str]]:
    return [(e.combatant, e.kind) for e in of(events, ev.TurnStarted)]


def place(story: Story, who: str) -> int | None:
    combatant = story.state.get(who)
    assert combatant is not None
    return combatant.place


# ----------------------------------------------------------------------------- when to hold


@BOTH
def test_r9_hold_only_before_acting_in_own_turn(ruleset: str) -> None:
    story = fight(ruleset)
    story.do(c.DeclareAction(story.turn, ActionSpec("move")))
    error = story.refuse(c.Hold(story.turn))
    assert error.code == "action_taken"


@BOTH
def test_r9_hold_only_once_own_turn_has_started(ruleset: str) -> None:
    story = fight(ruleset)
    assert story.current == "ana"
    error = story.refuse(c.Hold(TurnRef(1, "ben")))
    assert error.code == "stale_turn"


@BOTH
def test_r9_hold_open_ends_the_turn_without_spending_the_round(ruleset: str) -> None:
    story = fight(ruleset)
    events = hold(story)
    held = of(events, ev.TurnHeld)[0]
    assert (held.combatant, held.round, held.number) == ("ana", 1, None)
    assert "turn_ended" not in names(events)
    assert turn_starts(events) == [("ben", "normal")]
    assert [h.combatant for h in story.state.holds] == ["ana"]


@BOTH
def test_r9_hold_named_number_must_be_lower(ruleset: str) -> None:
    story = fight(ruleset)
    for number in (15, 16):
        error = story.refuse(c.Hold(story.turn, number))
        assert (error.code, error.field) == ("invalid_hold_number", "number")
    events = hold(story, 14)
    assert of(events, ev.TurnHeld)[0].number == 14


# ------------------------------------------------------------------------- taking the turn


@BOTH
def test_r9_before_x_starts_when_x_turn_would_start(ruleset: str) -> None:
    story = fight(ruleset)
    hold(story)
    take(story, "ana", "before", "cal")
    events = story.end_turn()  # Ben ends: Cal's turn would start now
    assert turn_starts(events) == [("ana", "held")]
    assert names(events) == ["turn_ended", "place_changed", "turn_started"]
    events = story.end_turn()
    assert turn_starts(events) == [("cal", "normal")]


@BOTH
def test_r9_after_x_starts_when_x_turn_ends(ruleset: str) -> None:
    story = fight(ruleset, who=("ana", "ben", "cal", "dan"))
    hold(story)
    take(story, "ana", "after", "cal")
    events = story.end_turn()  # Ben ends: Cal is next, not Ana
    assert turn_starts(events) == [("cal", "normal")]
    events = story.end_turn()  # Cal ends
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("dan", "normal")]


@BOTH
def test_r9_held_turn_never_interrupts_a_turn_in_progress(ruleset: str) -> None:
    story = fight(ruleset)
    hold(story)
    assert story.current == "ben"
    events = take(story, "ana", "after", "ben")
    assert names(events) == ["hold_planned"]
    assert story.current == "ben"
    story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    assert story.current == "ben"
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]


@BOTH
def test_r9_named_number_starts_when_the_order_reaches_it(ruleset: str) -> None:
    story = fight(ruleset)
    events = hold(story, 10)
    assert turn_starts(events) == [("ben", "normal")]
    events = story.end_turn()  # after Ben (12), before Cal (9)
    assert turn_starts(events) == [("ana", "held")]
    assert of(events, ev.PlaceChanged)[0].place == 10
    assert story.state.order == ("ben", "ana", "cal")


@BOTH
def test_r9_named_number_below_everyone_starts_after_the_last(ruleset: str) -> None:
    story = fight(ruleset)
    hold(story, 2)
    story.end_turn()
    events = story.end_turn()  # Cal (9) ends; the count reaches 2 before the round ends
    assert turn_starts(events) == [("ana", "held")]
    assert "round_ended" not in names(events)
    assert story.state.order == ("ben", "cal", "ana")
    assert place(story, "ana") == 2


@BOTH
def test_r9_named_numbers_start_as_the_count_reaches_each(ruleset: str) -> None:
    # Ana holds at 7, then Ben at 8: both fall between Cal (9) and Dan (6), and the count
    # reaches 8 first, whoever began holding first.
    story = fight(ruleset, who=("ana", "ben", "cal", "dan"))
    hold(story, 7)
    hold(story, 8)
    assert story.current == "cal"
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    assert story.state.order == ("cal", "ben", "ana", "dan")
    assert (place(story, "ben"), place(story, "ana")) == (8, 7)


def test_r9_named_number_tie_chain_marvel_higher_modifier_first() -> None:
    # At 12 the chain compares Fantastic, then the modifier: Ben's +1 beats Ana's +0.
    story = fight("marvel", mods={"ben": 1})
    hold(story, 12)
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    assert story.state.order == ("ben", "ana", "cal")
    # With the higher modifier the holder goes ahead of Ben at 12, which is right away.
    story = fight("marvel", mods={"ana": 2})
    events = hold(story, 12)
    assert turn_starts(events) == [("ana", "held")]
    assert story.state.order == ("ana", "ben", "cal")
    assert place(story, "ana") == 12


def test_r9_named_number_tie_chain_dnd3e_bonus_then_dexterity() -> None:
    story = fight("dnd3e", mods={"ben": 3, "ana": 1})
    hold(story, 12)
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    assert story.state.order == ("ben", "ana", "cal")
    story = fight("dnd3e", dex={"ana": 14})
    events = hold(story, 12)
    assert turn_starts(events) == [("ana", "held")]
    assert story.state.order == ("ana", "ben", "cal")


@BOTH
def test_r9_place_becomes_that_point_for_rest_of_combat(ruleset: str) -> None:
    story = fight(ruleset, who=("ana", "ben", "cal", "dan"))
    hold(story)
    take(story, "ana", "before", "cal")
    events = story.end_turn()
    changed = of(events, ev.PlaceChanged)[0]
    assert (changed.combatant, changed.place) == ("ana", NUMBERS["cal"])
    assert changed.order == ("ben", "ana", "cal", "dan")
    story.end_turn()
    story.end_turn()
    story.end_turn()
    assert story.state.round == 2
    assert story.run_round() == ["ben", "ana", "cal", "dan"]
    assert story.run_round() == ["ben", "ana", "cal", "dan"]


@BOTH
def test_r9_after_x_takes_x_number(ruleset: str) -> None:
    story = fight(ruleset, who=("ana", "ben", "cal", "dan"))
    hold(story)
    take(story, "ana", "after", "ben")
    story.end_turn()
    assert story.current == "ana"
    assert place(story, "ana") == NUMBERS["ben"]
    assert story.state.order == ("ben", "ana", "cal", "dan")


# ---------------------------------------------------------------------- across rounds (marvel)


def test_r9_marvel_hold_lasts_past_round_end() -> None:
    story = fight("marvel")
    story.end_turn()
    story.end_turn()
    events = hold(story)  # Cal, last, holds: the round ends with the hold still on
    assert [e.round for e in of(events, ev.RoundEnded)] == [1]
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]
    assert of(events, ev.HoldCancelled) == []
    assert [(h.combatant, h.round) for h in story.state.holds] == [("cal", 1)]
    assert story.current == "ana"


def test_r9_marvel_held_turn_taken_in_new_round_before_normal_place_rises() -> None:
    story = fight("marvel")
    story.end_turn()
    story.end_turn()
    hold(story)  # Cal holds into round 2
    assert (story.state.round, story.current) == (2, "ana")
    take(story, "cal", "after", "ana")
    events = story.end_turn()
    assert turn_starts(events) == [("cal", "held")]
    assert place(story, "cal") == NUMBERS["ana"]
    assert story.state.order == ("ana", "cal", "ben")
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "normal")]
    events = story.end_turn()  # that was Cal's turn for round 2: no second one
    assert [e.round for e in of(events, ev.RoundStarted)] == [3]
    assert story.run_round() == ["ana", "cal", "ben"]


def test_r9_marvel_held_turn_before_first_in_new_round_rises_to_the_top() -> None:
    story = fight("marvel")
    story.end_turn()
    hold(story)  # Ben holds; during Cal's turn it plans to go before Ana
    take(story, "ben", "before", "ana")
    events = story.end_turn()
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]
    assert turn_starts(events) == [("ben", "held")]
    assert of(events, ev.HoldLapsed) == []
    assert place(story, "ben") == NUMBERS["ana"]
    assert story.state.order == ("ben", "ana", "cal")
    story.end_turn()
    story.end_turn()
    events = story.end_turn()
    assert [e.round for e in of(events, ev.RoundStarted)] == [3]
    assert story.run_round() == ["ben", "ana", "cal"]


def test_r9_marvel_normal_place_comes_while_holding_hold_lapses() -> None:
    story = fight("marvel")
    story.end_turn()
    hold(story)  # Ben holds and never takes it
    events = story.end_turn()  # Cal ends; round 2: Ana
    assert (story.state.round, story.current) == (2, "ana")
    assert of(events, ev.HoldLapsed) == []
    events = story.end_turn()  # Ben's normal place comes up
    lapsed = of(events, ev.HoldLapsed)
    assert [(e.combatant, e.round) for e in lapsed] == [("ben", 2)]
    assert names(events).index("hold_lapsed") < names(events).index("turn_started")
    assert turn_starts(events) == [("ben", "normal")]
    assert story.state.holds == ()
    assert place(story, "ben") == NUMBERS["ben"]
    events = hold(story)  # it may hold again
    assert of(events, ev.TurnHeld)[0].round == 2


def test_r9_marvel_first_in_order_holding_lapses_at_round_start() -> None:
    story = fight("marvel")
    hold(story)
    story.end_turn()
    events = story.end_turn()
    assert names(events) == [
        "turn_ended",
        "round_ended",
        "round_started",
        "hold_lapsed",
        "turn_started",
    ]
    assert turn_starts(events) == [("ana", "normal")]


# ------------------------------------------------------------------------- several holders


def test_r9_two_holders_marvel_first_holder_first() -> None:
    # Ben's higher modifier does not matter in marvel: Ana began holding first.
    story = fight("marvel", who=("ana", "ben", "cal", "dan"), mods={"ben": 3})
    hold(story)
    hold(story)
    assert story.current == "cal"
    take(story, "ben", "after", "cal")
    take(story, "ana", "after", "cal")
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("dan", "normal")]


def test_r9_two_holders_marvel_first_holder_first_before_x() -> None:
    story = fight("marvel", who=("ana", "ben", "cal", "dan"))
    hold(story)
    hold(story)
    take(story, "ben", "before", "dan")
    take(story, "ana", "before", "dan")
    events = story.end_turn()  # Cal ends: Dan's turn would start
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("dan", "normal")]


def test_r9_two_holders_marvel_first_holder_first_same_number() -> None:
    # Both name 3, below everyone: Ben's higher modifier does not matter, Ana held first.
    story = fight("marvel", mods={"ben": 2})
    hold(story, 3)
    hold(story, 3)
    events = story.end_turn()  # Cal ends; the count reaches 3
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]


def test_r9_two_holders_marvel_first_holder_first_same_number_between_turns() -> None:
    story = fight("marvel", who=("ana", "ben", "cal", "dan"), mods={"ben": 2})
    hold(story, 7)
    hold(story, 7)
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]


def test_r9_two_holders_dnd3e_higher_bonus_first() -> None:
    story = fight("dnd3e", who=("ana", "ben", "cal", "dan"), mods={"ana": 1, "ben": 4})
    hold(story)  # Ana delays first, but Ben has the higher bonus
    hold(story)
    take(story, "ana", "after", "cal")
    take(story, "ben", "after", "cal")
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("dan", "normal")]


def test_r9_two_holders_dnd3e_same_bonus_higher_dexterity_first() -> None:
    story = fight("dnd3e", who=("ana", "ben", "cal", "dan"), dex={"ana": 12, "ben": 16})
    hold(story)
    hold(story)
    take(story, "ana", "before", "dan")
    take(story, "ben", "before", "dan")
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]


@pytest.mark.parametrize("asks_first", ["ana", "ben"])
def test_r9_dnd3e_each_after_the_other_higher_bonus_goes_last(asks_first: str) -> None:
    story = fight("dnd3e", who=("ana", "ben", "cal", "dan"), mods={"ana": 1, "ben": 4})
    hold(story)
    hold(story)
    assert story.current == "cal"
    other = {"ana": "ben", "ben": "ana"}
    take(story, asks_first, "after", other[asks_first])
    take(story, other[asks_first], "after", asks_first)
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("dan", "normal")]


# -------------------------------------------------------------------------- the dnd3e floor


def test_r9_dnd3e_cannot_name_below_floor() -> None:
    story = fight("dnd3e", mods={"ana": 2})
    error = story.refuse(c.Hold(story.turn, -13))  # floor: -10 - 2
    assert (error.code, error.field) == ("below_delay_floor", "number")
    events = hold(story, -12)
    assert of(events, ev.TurnHeld)[0].number == -12


def test_r9_marvel_has_no_floor() -> None:
    story = fight("marvel", mods={"ana": 2})
    events = hold(story, -40)
    assert of(events, ev.TurnHeld)[0].number == -40


def test_r9_dnd3e_open_delayer_starts_at_floor_at_round_end() -> None:
    story = fight("dnd3e", mods={"ana": 2})
    hold(story)
    story.end_turn()
    events = story.end_turn()  # Cal, the last, ends: the count reaches Ana's floor
    changed = of(events, ev.PlaceChanged)[0]
    assert (changed.combatant, changed.place) == ("ana", -12)
    assert changed.order == ("ben", "cal", "ana")
    assert turn_starts(events) == [("ana", "floor")]
    assert "round_ended" not in names(events)


def test_r9_dnd3e_two_open_delayers_reach_their_floors_in_count_order() -> None:
    # Floors: Ana -10 - 1 = -11, Ben -10 - 4 = -14; the count reaches -11 first.
    story = fight("dnd3e", mods={"ana": 1, "ben": 4})
    hold(story)
    hold(story)
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "floor")]
    assert place(story, "ana") == -11
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "floor")]
    assert place(story, "ben") == -14
    assert story.state.order == ("cal", "ana", "ben")
    events = story.end_turn()
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]


def test_r9_dnd3e_floor_turn_ended_without_acting_is_delay_forfeited() -> None:
    story = fight("dnd3e", mods={"ana": 2})
    hold(story)
    story.end_turn()
    story.end_turn()
    events = story.end_turn()
    assert [(e.combatant, e.round) for e in of(events, ev.DelayForfeited)] == [("ana", 1)]
    assert names(events)[:2] == ["delay_forfeited", "turn_ended"]
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]


def test_r9_dnd3e_floor_turn_acting_is_not_forfeited() -> None:
    story = fight("dnd3e", mods={"ana": 2})
    hold(story)
    story.end_turn()
    story.end_turn()
    story.do(c.DeclareAction(story.turn, ActionSpec("attack")))
    events = story.end_turn()
    assert of(events, ev.DelayForfeited) == []


def test_r9_dnd3e_delay_never_carries_into_next_round() -> None:
    story = fight("dnd3e", mods={"ana": 2})
    hold(story)
    assert story.run_round() == ["ben", "cal", "ana"]
    assert story.state.round == 2
    assert story.state.holds == ()
    assert story.state.turn is not None
    assert (story.current, story.state.turn.kind) == ("ben", "normal")
    assert story.run_round() == ["ben", "cal", "ana"]
    assert place(story, "ana") == -12


def test_r9_dnd3e_delay_3_5_removes_floor() -> None:
    story = fight("dnd3e", mods={"ana": 2}, delay="3.5")
    events = hold(story, -40)
    assert of(events, ev.TurnHeld)[0].number == -40
    story.end_turn()
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    assert place(story, "ana") == -40


def test_r9_dnd3e_delay_3_5_open_delayer_waits_until_everyone_else_acted() -> None:
    story = fight("dnd3e", mods={"ana": 2}, delay="3.5")
    hold(story)
    story.end_turn()
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "floor")]
    assert story.state.order == ("ben", "cal", "ana")
    events = story.end_turn()
    assert [e.combatant for e in of(events, ev.DelayForfeited)] == ["ana"]
    assert story.state.holds == ()


# ------------------------------------------------------------------ found in review, kept here


def test_r9_dnd3e_floor_turn_cannot_be_delayed_again() -> None:
    story = fight("dnd3e", ("ana", "ben"))
    hold(story)
    story.end_turn()  # Ben ends: Ana's turn at the floor
    assert story.state.turn is not None
    assert story.state.turn.kind == "floor"
    error = story.refuse(c.Hold(story.turn))
    assert (error.code, error.field) == ("must_act", "turn")


def test_r9_dnd3e_floor_turn_timer_set_to_hold_ends_it_as_forfeited() -> None:
    story = fight("dnd3e", ("ana", "ben"), turn_time_limit=10.0, turn_expiry="hold")
    hold(story)
    story.end_turn()
    events = story.do(c.Tick(), now=story.now + 10.0)
    assert [e.action for e in of(events, ev.TurnTimerExpired)] == ["end_turn"]
    assert [e.combatant for e in of(events, ev.DelayForfeited)] == ["ana"]
    assert "round_ended" in names(events)


@BOTH
def test_r9_before_x_goes_first_when_x_starts_a_held_turn(ruleset: str) -> None:
    story = fight(ruleset, ("ana", "ben", "cal", "dan"))
    hold(story)  # Ana
    hold(story)  # Ben
    take(story, "ana", "before", "ben")
    take(story, "ben", "after", "cal")
    events = story.end_turn()  # Cal ends: Ben's held turn would start, so Ana goes before him
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    assert story.state.order == ("cal", "ana", "ben", "dan")
    assert (place(story, "ana"), place(story, "ben")) == (9, 9)


@BOTH
def test_r9_after_x_and_before_y_at_one_moment_go_by_holder_priority(ruleset: str) -> None:
    # Ana holds first and has the higher bonus; both want the gap between Cal and Dan.
    story = fight(ruleset, ("ana", "ben", "cal", "dan"), mods={"ana": 3})
    hold(story)
    hold(story)
    take(story, "ana", "before", "dan")
    take(story, "ben", "after", "cal")
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]


def test_r9_dnd3e_plan_reset_keeps_the_named_number() -> None:
    story = fight("dnd3e", ("ana", "ben", "cal", "dan"))
    hold(story, 10)
    take(story, "ana", "before", "dan")
    story.do(c.DefeatCombatant("dan"))
    hold_now = story.state.hold_of("ana")
    assert hold_now is not None
    assert (hold_now.plan, hold_now.number) == ("at", 10)
    events = story.end_turn()  # Ben (12) ends; the count reaches 10 before Cal (9)
    assert turn_starts(events) == [("ana", "held")]


def test_r9_dnd3e_count_reaches_named_numbers_and_floors_highest_first() -> None:
    # Ana (+0) delays open: her floor is -10. Ben (+5, floor -15) names -12, below it.
    story = fight("dnd3e", ("ana", "ben", "cal"), mods={"ben": 5})
    hold(story)
    hold(story, -12)
    events = story.end_turn()  # Cal ends: the count runs below everyone
    assert turn_starts(events) == [("ana", "floor")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    assert story.state.order == ("cal", "ana", "ben")


# ------------------------------------------------------- the plan said with the hold, or too late


def hold_planning(story: Story, when: str, other: str, number: int | None = None) -> list[ev.Event]:
    return story.do(c.Hold(story.turn, number, when, other))  # type: ignore[arg-type]


def test_r9_marvel_last_to_act_holds_planning_before_the_first_of_next_round() -> None:
    story = fight("marvel")
    story.end_turn()
    story.end_turn()
    events = hold_planning(story, "before", "ana")  # Cal, last, holds: the round ends at once
    assert names(events) == [
        "turn_held",
        "hold_planned",
        "round_ended",
        "round_started",
        "place_changed",
        "turn_started",
    ]
    assert turn_starts(events) == [("cal", "held")]
    assert of(events, ev.HoldLapsed) == []
    assert story.state.order == ("cal", "ana", "ben")
    assert place(story, "cal") == NUMBERS["ana"]
    assert story.run_round() == ["cal", "ana", "ben"]  # no second turn for Cal in round 2
    assert story.run_round() == ["cal", "ana", "ben"]


@BOTH
def test_r9_hold_plan_and_hold_planned_use_the_same_words(ruleset: str) -> None:
    story = fight(ruleset, ("ana", "ben", "cal", "dan"))
    events = hold_planning(story, "after", "cal", number=10)
    (planned,) = of(events, ev.HoldPlanned)
    held = story.state.hold_of("ana")
    assert held is not None
    assert (planned.plan, planned.target) == (held.plan, held.target) == ("after", "cal")
    assert held.number == 10
    events = story.do(c.DefeatCombatant("cal"))  # the plan falls back to the named number
    (planned,) = of(events, ev.HoldPlanned)
    held = story.state.hold_of("ana")
    assert held is not None
    assert (planned.plan, planned.target) == (held.plan, held.target) == ("at", None)


@BOTH
def test_r9_hold_plan_needs_when_and_other_together(ruleset: str) -> None:
    story = fight(ruleset)
    error = story.refuse(c.Hold(story.turn, when="before"))
    assert (error.code, error.field) == ("invalid_value", "other")
    error = story.refuse(c.Hold(story.turn, other="cal"))
    assert (error.code, error.field) == ("invalid_value", "when")
    error = story.refuse(c.Hold(story.turn, when="before", other="ana"))
    assert (error.code, error.field) == ("invalid_target", "other")


def test_r9_marvel_before_x_said_during_x_turn_is_refused_and_changes_nothing() -> None:
    story = fight("marvel")
    story.end_turn()
    story.end_turn()
    hold(story)  # Cal holds with nothing said: round 2 starts with Ana's turn
    assert (story.state.round, story.current) == (2, "ana")
    error = story.refuse(c.TakeHeldTurn("cal", "before", "ana"))
    assert (error.code, error.field) == ("moment_passed", "other")
    take(story, "cal", "after", "ana")  # Ana's turn has not ended: that moment still comes
    events = story.end_turn()
    assert turn_starts(events) == [("cal", "held")]


def test_r9_marvel_a_carried_hold_cannot_wait_past_its_own_place() -> None:
    story = fight("marvel")
    story.end_turn()
    hold(story)  # Ben holds into round 2
    story.end_turn()
    assert (story.state.round, story.current) == (2, "ana")
    for when in ("before", "after"):  # Ben's own place comes before Cal's: the hold lapses
        error = story.refuse(c.TakeHeldTurn("ben", when, "cal"))  # type: ignore[arg-type]
        assert (error.code, error.field) == ("moment_passed", "other")


def test_r9_marvel_before_someone_who_acted_means_next_round_if_they_come_first() -> None:
    story = fight("marvel")
    story.end_turn()
    events = hold_planning(story, "before", "ana")  # Ana acted this round: next round's Ana
    assert [(h.combatant, h.plan, h.target) for h in story.state.holds] == [
        ("ben", "before", "ana")
    ]
    assert turn_starts(events) == [("cal", "normal")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    assert story.state.round == 2


def test_r9_marvel_before_someone_after_the_holder_who_acted_is_refused() -> None:
    story = fight("marvel", ("ana", "ben", "cal", "dan"))
    hold(story)  # Ana holds; Ben acts; Ana cannot wait for next round's Ben (her place is first)
    story.end_turn()
    error = story.refuse(c.TakeHeldTurn("ana", "before", "ben"))
    assert (error.code, error.field) == ("moment_passed", "other")
    error = story.refuse(c.TakeHeldTurn("ana", "after", "ben"))
    assert error.code == "moment_passed"


def test_r9_dnd3e_a_delay_cannot_wait_for_someone_who_has_acted() -> None:
    story = fight("dnd3e")
    story.end_turn()
    error = story.refuse(c.Hold(story.turn, when="before", other="ana"))
    assert (error.code, error.field) == ("moment_passed", "other")
    error = story.refuse(c.Hold(story.turn, when="after", other="ana"))
    assert (error.code, error.field) == ("moment_passed", "other")
    events = hold_planning(story, "after", "cal")
    assert turn_starts(events) == [("cal", "normal")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]


@BOTH
def test_r9_hold_planning_after_a_holder_waiting_after_it_goes_by_holder_priority(
    ruleset: str,
) -> None:
    # Ana held first (marvel) and Ben's bonus is higher (dnd3e: higher goes last): Ana first.
    story = fight(ruleset, ("ana", "ben", "cal", "dan"), mods={"ben": 3})
    hold(story)
    take(story, "ana", "after", "ben")
    events = hold_planning(story, "after", "ana")  # each after the other, said between turns
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("ben", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("cal", "normal")]


def test_r9_marvel_a_carried_holder_next_in_order_goes_first_of_two_mutual_waiters() -> None:
    # Ben held in round 1 planning "after Ana" (next round, as Ana has acted). In round 2 Ana
    # holds planning "after Ben": each waits for the other, and Ben (who held first) goes first.
    # The next turn is Ben's own place, where his carried hold lapses: he takes it there, not
    # "just before" himself, and Ana follows him.
    story = fight("marvel")
    story.end_turn()
    hold_planning(story, "after", "ana")
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "normal")]
    events = hold_planning(story, "after", "ben")
    assert turn_starts(events) == [("ben", "normal")]
    events = story.end_turn()
    assert turn_starts(events) == [("ana", "held")]
    events = story.end_turn()
    assert turn_starts(events) == [("cal", "normal")]


def test_r9_hold_planned_recorded_by_older_daemons_still_folds() -> None:
    story = fight("dnd3e", ("ana", "ben", "cal", "dan"))
    hold(story, 10)
    take(story, "ana", "before", "dan")
    old = {"event": "hold_planned", "combatant": "ana", "when": "open", "other": ""}
    event = event_from_plain(old)
    assert event == ev.HoldPlanned("ana", None, None)
    held = evolve(story.state, event).hold_of("ana")
    assert held is not None
    assert (held.plan, held.target, held.number) == ("at", None, 10)
    old = {"event": "hold_planned", "combatant": "ana", "when": "after", "other": "ben"}
    assert event_from_plain(old) == ev.HoldPlanned("ana", "after", "ben")


# ------------------------------------------------------------------------ over the real socket

WIRE_CHECKS = {"a": (5, [5, 5, 5]), "b": (0, [5, 5, 5]), "c": (0, [3, 3, 4])}
"""A 20 (+5 on 15), B 15, C 10: (initiative modifier, d616 faces), none Fantastic."""


class _Table:
    """One marvel combat over a real daemon's socket: A, B and C, round 1 under way."""

    def __init__(self, client: Client, combat: str) -> None:
        self.client, self.combat, self.ids = client, combat, itertools.count()
        self.do("create_combat", combat_id=combat, ruleset="marvel")
        for cid, (mod, dice) in WIRE_CHECKS.items():
            self.do("add_combatant", id=cid, display_name=cid.upper(), init_mod=mod)
            self.do("roll_initiative", combatant=cid, faces=dice)
        self.do("start_combat")

    def do(self, method: str, **params: Any) -> Any:
        request = f"{self.combat}-{next(self.ids)}"
        if method == "create_combat":
            return self.client.call(method, request_id=request, **params)
        return self.client.call(method, combat=self.combat, request_id=request, **params)

    def view(self) -> dict[str, Any]:
        return self.client.call("get_combat", combat=self.combat)["view"]  # type: ignore[no-any-return]

    @property
    def turn(self) -> dict[str, Any]:
        turn = self.view()["turn"]
        assert isinstance(turn, dict)
        return turn

    def ref(self) -> dict[str, Any]:
        t = self.turn
        return {"round": t["round"], "combatant": t["combatant"], "number": t["number"]}

    def end_turn(self) -> None:
        self.do("end_turn", turn=self.ref())

    def rounds(self, count: int) -> list[tuple[int, str, str]]:
        """End turns through ``count`` rounds: (round, combatant, kind) of each turn."""
        seen: list[tuple[int, str, str]] = []
        last = self.turn["round"] + count
        while (t := self.turn)["round"] < last:
            seen.append((t["round"], t["combatant"], t["kind"]))
            self.end_turn()
        return seen


ROUNDS_2_AND_3 = [
    (2, "c", "held"),
    (2, "a", "normal"),
    (2, "b", "normal"),
    (3, "c", "normal"),
    (3, "a", "normal"),
    (3, "b", "normal"),
]


def test_r9_wire_last_to_act_holds_with_its_plan_and_goes_first_next_round(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        table = _Table(d.client(), "plan-at-once")
        assert table.view()["order"] == ["a", "b", "c"]
        table.end_turn()  # A acts
        table.end_turn()  # B acts
        assert table.turn["combatant"] == "c"
        table.do("hold", turn=table.ref(), when="before", other="a")
        assert table.view()["order"] == ["c", "a", "b"]
        assert table.rounds(2) == ROUNDS_2_AND_3
        # A plan naming a moment gone by is refused with its code and field, changing nothing.
        table.do("hold", turn=table.ref())  # C, round 4: holds with nothing said
        assert table.turn["combatant"] == "a"
        before = table.client.call("get_combat", combat=table.combat)
        with pytest.raises(CallError) as refused:  # during A's turn: too late to go before A
            table.do("take_held_turn", combatant="c", when="before", other="a")
        assert (refused.value.code, refused.value.field) == ("moment_passed", "other")
        assert table.client.call("get_combat", combat=table.combat) == before


def test_r9_wire_the_plan_in_a_separate_request_before_the_round_ends(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        table = _Table(d.client(), "plan-later")
        table.end_turn()  # A acts
        table.do("hold", turn=table.ref(), number=5)  # B acts at 5, after C
        table.do("hold", turn=table.ref())  # C holds, saying nothing yet
        assert (table.turn["round"], table.turn["combatant"]) == (1, "b")  # B at 5: round 1
        table.do("take_held_turn", combatant="c", when="before", other="a")
        planned = table.view()["holds"]
        assert [(h["combatant"], h["plan"], h["target"]) for h in planned] == [("c", "before", "a")]
        table.end_turn()  # B ends; round 1 ends
        assert table.view()["order"] == ["c", "a", "b"]
        assert table.rounds(2) == ROUNDS_2_AND_3


# ------------------------------------------------------------- what a client can tell from the view


def moment_comes_by_the_view(seen: View, holder: str, when: str, other: str) -> bool:
    """Whether the moment just ``when`` ``other``'s turn still comes for ``holder``'s hold, told
    from the view alone, as the table view tells it (web/controls.js, momentComes)."""
    waiting = any(h.combatant == other for h in seen.holds)
    acting = seen.turn is not None and seen.turn.combatant == other
    this_round = waiting or (when == "after" and acting) or other not in seen.reached
    if seen.phase == "bonus_round" and other not in seen.bonus:
        this_round = waiting
    if other not in seen.order or holder not in seen.order:
        return this_round
    comes_first = seen.order.index(other) < seen.order.index(holder)
    if holder not in seen.reached:
        return this_round and (waiting or acting or comes_first)
    return this_round or (seen.ruleset == "marvel" and comes_first)


@BOTH
def test_r9_the_view_tells_which_moments_a_held_turn_may_still_name(ruleset: str) -> None:
    """Every plan the view says is still to come is accepted, every other one is refused with
    moment_passed: through two rounds of holds, each taken at a moment of its own."""
    story = fight(ruleset, ("ana", "ben", "cal", "dan"))
    dice = {"dice": SeededDice(0), "rules": BUNDLED_RULES}
    judged = 0

    def judge_every_plan() -> None:
        nonlocal judged
        seen = view(story.state, NARRATOR)
        assert seen.reached == tuple(sorted(story.state.reached))
        for h, when, other in itertools.product(seen.holds, ("before", "after"), seen.order):
            if other == h.combatant:
                continue
            command = c.TakeHeldTurn(h.combatant, when, other)  # type: ignore[arg-type]
            result = decide(story.state, command, story.now, **dice)  # type: ignore[arg-type]
            refused = result.code if isinstance(result, RuleError) else None
            expected = (
                None
                if moment_comes_by_the_view(seen, h.combatant, when, other)
                else "moment_passed"
            )
            assert refused == expected, (seen.round, seen.turn, h, when, other)
            judged += 1

    hold(story)  # Ana holds
    judge_every_plan()
    story.end_turn()  # Ben
    judge_every_plan()
    hold(story)  # Cal holds too
    judge_every_plan()
    take(story, "ana", "after", "dan")
    story.end_turn()  # Dan: Ana's held turn follows
    judge_every_plan()
    story.end_turn()  # Ana's held turn; marvel: Cal still holds into round 2
    judge_every_plan()
    while story.state.round == 1:
        story.end_turn()
    judge_every_plan()
    assert judged > 20
