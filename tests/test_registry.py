"""Rulesets and condition types come in a rule book the caller passes, so a third party (a
plugin) can add a game system the engine has never heard of, through the SDK alone, and two
books in one process never leak into each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

import pytest

from story import Story, of
from turnkeeper_engine import NameTakenError, SeededDice, State, decide
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.dice import DiceSource
from turnkeeper_engine.model import ActionSpec, Check, Combatant, OptionValue
from turnkeeper_sdk import BUNDLED_RULES, ConditionType, RuleBook, Ruleset


class Countdown(Ruleset):
    """A toy system: d10 + modifier, ties to the lower modifier, one action a turn."""

    name: ClassVar[str] = "countdown"
    title: ClassVar[str] = "Countdown"
    catalogue: ClassVar[Mapping[str, str]] = {"strike": "action"}
    action_types: ClassVar[tuple[str, ...]] = ("action",)
    rolloff_sides: ClassVar[int] = 10
    supplied_tie_order: ClassVar[bool] = False
    reserve_mode: ClassVar[Literal["reserve", "ready"]] = "reserve"
    claim_costs_reaction: ClassVar[bool] = True
    fresh_sequence_checks: ClassVar[bool] = False
    holds_carry_over: ClassVar[bool] = True

    def roll(
        self,
        combatant: Combatant,
        dice: DiceSource,
        *,
        edges: int = 0,
        troubles: int = 0,
        faces: tuple[int, ...] | None = None,
        supplied_by: str | None = None,
    ) -> Check:
        face = faces[0] if faces else dice.roll(10)
        total = face + combatant.init_mod
        return Check("d10", (face,), (face,), combatant.init_mod, total, supplied_by=supplied_by)

    def tie_key(self, combatant: Combatant, total: int, fantastic: bool) -> tuple[int, ...]:
        return (total, -combatant.init_mod)

    def can_spend(self, used: tuple[str, ...], action_type: str) -> bool:
        return not used

    def carries(
        self, reserved_type: str, action_type: str, options: Mapping[str, OptionValue]
    ) -> bool:
        return True

    def reservable_types(self, options: Mapping[str, OptionValue]) -> tuple[str, ...]:
        return ("action",)

    def holder_priority(self, combatant: Combatant, hold_seq: int) -> tuple[int, ...]:
        return (hold_seq,)


class Impostor(Countdown):
    """Another system under a name the bundled book gives to marvel."""

    name: ClassVar[str] = "marvel"


COUNTDOWN = BUNDLED_RULES.with_rulesets([Countdown()])


def test_a_ruleset_in_the_book_runs_a_combat_by_its_own_rules() -> None:
    s = Story("countdown", rules=COUNTDOWN)
    s.add("fast", init_mod=3)
    s.add("slow", init_mod=1)
    s.roll("fast", 4)
    s.roll("slow", 6)  # 7 against 7: the lower modifier goes first in this system
    s.do(c.StartCombat())
    assert s.state.order == ("slow", "fast")
    s.do(c.DeclareAction(s.turn, ActionSpec("strike")))
    refused = s.refuse(c.DeclareAction(s.turn, ActionSpec("strike")))
    assert refused.code == "action_unavailable"
    assert s.run_round() == ["slow", "fast"]


def test_a_taken_ruleset_name_is_refused_and_the_same_ruleset_again_changes_nothing() -> None:
    with pytest.raises(NameTakenError, match="already in the rule book"):
        BUNDLED_RULES.with_rulesets(
            [Countdown.__new__(type("Marvel", (Countdown,), {"name": "marvel"}))]
        )
    marvel = BUNDLED_RULES.ruleset("marvel")
    assert marvel is not None
    assert BUNDLED_RULES.with_rulesets([marvel]).ruleset("marvel") is marvel


def test_a_larger_book_leaves_the_one_it_came_from_as_it_was() -> None:
    assert BUNDLED_RULES.ruleset("countdown") is None
    assert COUNTDOWN.ruleset("countdown") is not None
    refused = decide(
        State(), c.CreateCombat("x", "countdown"), 0.0, dice=SeededDice(0), rules=BUNDLED_RULES
    )
    assert not isinstance(refused, list)
    assert (refused.code, refused.field) == ("unknown_ruleset", "ruleset")


def test_unknown_ruleset_is_refused_with_its_field() -> None:
    refused = decide(
        State(), c.CreateCombat("x", "pf2e"), 0.0, dice=SeededDice(0), rules=RuleBook()
    )
    assert not isinstance(refused, list)
    assert (refused.code, refused.field) == ("unknown_ruleset", "ruleset")


BURNING = BUNDLED_RULES.with_condition_types([ConditionType("burning", "On fire.")])


@pytest.mark.parametrize("ruleset", ["marvel", "dnd3e"])
def test_r13_a_condition_type_in_the_book_can_be_applied(ruleset: str) -> None:
    s = Story(ruleset, rules=BURNING)
    s.add("a")
    events = s.do(c.ApplyCondition("a", "burning", rounds=2))
    assert of(events, ev.ConditionApplied)[0].condition.type == "burning"


def test_r13_condition_types_not_in_the_book_or_foreign_are_refused() -> None:
    s = Story("dnd3e")
    s.add("a")
    assert s.refuse(c.ApplyCondition("a", "burning")).field == "type"
    # `surprised` belongs to marvel (R8).
    assert s.refuse(c.ApplyCondition("a", "surprised")).code == "unknown_condition_type"
