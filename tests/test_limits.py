"""Bad input is refused with a stable code and the offending field, and changes nothing."""

from __future__ import annotations

import math

import pytest

from story import Story
from turnkeeper_engine import commands as c
from turnkeeper_engine.decide import MAX_COMBATANTS, MAX_ITEMS, MAX_NAME, MAX_NUMBER
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger


def _started() -> Story:
    s = Story("marvel")
    s.add("a")
    s.add("b")
    s.roll("a", 6, 6, 6)
    s.roll("b", 2, 2, 2)
    s.do(c.StartCombat())
    return s


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (c.AddCombatant("x" * (MAX_NAME + 1), "X"), "id"),
        (c.AddCombatant("x", "X", init_mod=MAX_NUMBER + 1), "init_mod"),
        (c.AddCombatant("x", "X", dexterity=-MAX_NUMBER - 1), "dexterity"),
        (c.AddCombatant("x", "X", tags=tuple(f"t{i}" for i in range(MAX_ITEMS + 1))), "tags"),
        (c.AddCombatant("x", "X", group="g" * (MAX_NAME + 1)), "group"),
    ],
)
def test_oversized_combatant_fields_are_refused(command: c.Command, field: str) -> None:
    refused = Story("marvel").refuse(command)
    assert (refused.code, refused.field) == ("invalid_value", field)


def test_oversized_action_lists_are_refused() -> None:
    s = _started()
    many = tuple(f"t{i}" for i in range(MAX_ITEMS + 1))
    refused = s.refuse(c.DeclareAction(s.turn, ActionSpec("attack", tags=many)))
    assert (refused.code, refused.field) == ("invalid_value", "action.tags")
    trigger = Trigger("whenever", Predicate(kinds=many))
    refused = s.refuse(c.Reserve(s.turn, "standard", ActionSpec("attack"), trigger))
    assert refused.field == "trigger.predicate.kinds"


def test_a_hold_number_out_of_range_is_refused() -> None:
    s = _started()
    refused = s.refuse(c.Hold(s.turn, -MAX_NUMBER - 1))
    assert (refused.code, refused.field) == ("invalid_value", "number")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 10**9])
def test_time_options_must_be_finite_and_in_range(value: float) -> None:
    from turnkeeper_engine import State, decide

    refused = decide(State(), c.CreateCombat("x", "marvel", (("turn_time_limit", value),)), 0.0)
    assert not isinstance(refused, list)
    assert (refused.code, refused.field) == ("invalid_option", "options.turn_time_limit")


def test_a_combat_holds_at_most_max_combatants() -> None:
    s = Story("dnd3e")
    for i in range(MAX_COMBATANTS):
        s.add(f"c{i}")
    refused = s.refuse(c.AddCombatant("one-too-many", "One too many"))
    assert (refused.code, refused.field) == ("too_many_combatants", "id")
