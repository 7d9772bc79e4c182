"""Rulesets and condition types come in a rule book the caller passes, so a third party (a
plugin) can add a game system the engine has never heard of, through the SDK alone, and two
books in one process never leak into each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import pytest

from story import Story, of
from turnkeeper_engine import ClaimOrder, NameTakenError, SeededDice, State, decide
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.dice import DiceSource
from turnkeeper_engine.model import (
    ActionSpec,
    Check,
    Claim,
    Combatant,
    OptionValue,
    Trigger,
    TriggerFacts,
    Window,
)
from turnkeeper_sdk import BUNDLED_RULES, ConditionType, RuleBook, Ruleset, hookimpl
from turnkeeper_sdk.testing import Table


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


class Standoff(Countdown):
    """A third system defined here, not bundled: Countdown's dice, with rules of its own where
    the engine asks a ruleset how to play. A natural 10 earns a bonus round, the slowest
    claimant reacts first, and whoever takes a reserved action goes to the head of the
    order for the rest of the combat."""

    name: ClassVar[str] = "standoff"
    title: ClassVar[str] = "Standoff"

    def bonus_round(self, order: Sequence[Combatant]) -> tuple[str, ...]:
        return tuple(c.id for c in order if c.check is not None and c.check.rolled == (10,))

    def order_claims(
        self, claims: Sequence[tuple[Combatant, Claim]], order: tuple[str, ...], dice: DiceSource
    ) -> ClaimOrder:
        latest = {i: n for n, i in enumerate(order)}
        return ClaimOrder(tuple(sorted((c.id for c, _ in claims), key=latest.__getitem__))[::-1])

    def readied_reaction(
        self, state: State, readier: str, window: Window, reserved_round: int
    ) -> list[ev.Event]:
        head = state.get(state.order[0])
        assert head is not None
        assert head.place is not None
        order = (readier, *(i for i in state.order if i != readier))
        return [ev.PlaceChanged(readier, head.place + 1, order, "readied_action")]


class StandoffPlugin:
    """How a third party ships a game system: a plugin whose registration hook returns it."""

    @hookimpl
    def turnkeeper_rulesets(self) -> list[Ruleset]:
        return [Standoff()]


def test_a_third_ruleset_from_a_plugin_plays_by_its_own_rules() -> None:
    table = Table("standoff", plugins={"standoff": StandoffPlugin()})
    assert table.host.plugins["standoff"].provides == ("ruleset:standoff",)
    assert BUNDLED_RULES.ruleset("standoff") is None  # the plugin's book only
    for cid, mod, face in (("ann", 1, 10), ("bob", 2, 6), ("cid", 0, 4)):
        table.add(cid, init_mod=mod, faces=(face,))
    # Bonus round: the natural 10 alone (R7 asks the ruleset).
    table.start()
    assert (table.state.phase, table.state.bonus) == ("bonus_round", ("ann",))
    table.end_turn()
    assert table.state.round == 1
    assert table.state.turn is not None
    assert table.state.turn.combatant == "ann"  # 11 against bob's 8 and cid's 4
    # Bob reserves (marvel-like "reserve" mode); cid claims without one, stating its action.
    table.end_turn()
    action = ActionSpec("strike", description="quick draw")
    table.do(c.Reserve(table.turn(), "action", action, Trigger("when anyone moves")))
    facts = TriggerFacts("announced", text="ann reaches for her gun")
    window = of(table.do(c.AnnounceTrigger(facts, ("bob", "cid"))), ev.WindowOpened)[0].window
    bob = next(r.id for r in table.state.reservations if r.combatant == "bob")
    table.do(c.ClaimReaction(window.id, "bob", reservation=bob))
    events = table.do(c.ClaimReaction(window.id, "cid", action=ActionSpec("strike")))
    # The slowest claimant first (R12 asks the ruleset), no fresh checks.
    (ordered,) = of(events, ev.SequenceOrdered)
    assert (ordered.sequence, ordered.checks) == (("cid", "bob"), ())
    table.do(c.FinishReaction(window.id, "cid"))
    table.do(c.FinishReaction(window.id, "bob"))
    # Bob took a reserved action: Standoff puts him at the head of the order, above Ann's 11.
    assert table.state.order == ("bob", "ann", "cid")
    assert table.of(ev.PlaceChanged)[-1].place == 12
