"""The bundled auto-reactions plugin (R10–R12): claims for delegated reservations and standing
reactions, passes for idle bots."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

import pytest

import turnkeeper_auto_reactions
from story import QueueDice
from turnkeeper_auto_reactions import STANDING_EVENT, AutoReactionsPlugin
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import (
    ActionSpec,
    OptionValue,
    Predicate,
    Reservation,
    Trigger,
    TriggerFacts,
)
from turnkeeper_sdk.testing import Table

TableFactory = Callable[..., Table]
NAME = "auto-reactions"

CORNER = Trigger(
    "anyone who comes around the corner after him",
    Predicate(events=("move",), zones=("corner",)),
)
PUNCH = ActionSpec("attack", description="punch")


def table_of(
    turnkeeper_table: TableFactory, ruleset: str = "marvel", **options: OptionValue
) -> tuple[Table, QueueDice]:
    dice = QueueDice()
    table = turnkeeper_table(
        ruleset, plugins={NAME: AutoReactionsPlugin()}, dice=dice, options=options
    )
    return table, dice


def reserve(table: Table, action: ActionSpec, trigger: Trigger) -> Reservation:
    table.do(c.Reserve(table.turn(), "standard", action, trigger))
    return table.of(ev.ActionReserved)[-1].reservation


def names(events: list[ev.Event]) -> list[str]:
    return [e.name for e in events if e.name != "command_recorded"]


# ------------------------------------------------------------------------------ reservations


def cap_and_hydra(turnkeeper_table: TableFactory, *cap_tags: str) -> Table:
    """The seed's corner: Captain America (18) ahead of a Hydra agent (10)."""
    table, _ = table_of(turnkeeper_table)
    table.add("cap", player_character=True, controller="steve", init_mod=3, tags=cap_tags)
    table.add("agent", init_mod=1)
    table.do(c.RollInitiative("cap", faces=(6, 5, 4)))
    table.do(c.RollInitiative("agent", faces=(3, 3, 3)))
    table.start()
    return table


def test_r10_an_auto_combatant_claims_its_reservation(turnkeeper_table: TableFactory) -> None:
    table = cap_and_hydra(turnkeeper_table, "auto")
    reservation = reserve(table, PUNCH, CORNER)
    table.end_turn()
    events = table.do(c.DeclareAction(table.turn(), ActionSpec("move", zone="corner")))
    assert names(events) == [
        "action_declared",
        "window_opened",
        "reaction_claimed",
        "reaction_spent",
        "reservation_used",
        "window_closed",
        "sequence_ordered",
        "reaction_started",
    ]
    (claimed,) = table.of(ev.ReactionClaimed)
    assert (claimed.claim.combatant, claimed.claim.reservation) == ("cap", reservation.id)
    assert table.by(NAME) == ["claim_reaction"]
    # The punch lands before the agent's move goes ahead.
    window = table.state.window
    assert window is not None
    assert names(table.do(c.FinishReaction(window.id, "cap")))[-1] == "action_resolved"
    assert table.problems == []


def test_r10_a_reservation_tagged_auto_is_claimed_for_its_player(
    turnkeeper_table: TableFactory,
) -> None:
    table = cap_and_hydra(turnkeeper_table)
    reservation = reserve(table, ActionSpec("attack", tags=("auto",)), CORNER)
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), ActionSpec("move", zone="corner")))
    (claimed,) = table.of(ev.ReactionClaimed)
    assert claimed.claim.reservation == reservation.id
    assert table.problems == []


def test_r12_a_reservation_not_handed_over_waits_for_its_controller(
    turnkeeper_table: TableFactory,
) -> None:
    table = cap_and_hydra(turnkeeper_table)
    reserve(table, PUNCH, CORNER)
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), ActionSpec("move", zone="corner")))
    window = table.state.window
    assert window is not None
    assert (window.status, window.offered, window.claims) == ("open", ("cap",), ())
    assert table.by(NAME) == []


def test_r12_seed_mandarin_three_automatic_claims_roll_fresh_checks(
    turnkeeper_table: TableFactory,
) -> None:
    table, dice = table_of(turnkeeper_table)
    table.add("cap", player_character=True, init_mod=3, tags=("auto",))
    table.add("carter", player_character=True, init_mod=3, tags=("auto",))
    table.add("mandarin", init_mod=2, tags=("auto",))
    table.do(c.RollInitiative("cap", faces=(6, 6, 5)))  # 20
    table.do(c.RollInitiative("carter", faces=(6, 6, 4)))  # 19
    table.do(c.RollInitiative("mandarin", faces=(5, 5, 5)))  # 17
    table.start()
    mandarin_attacks = Trigger(
        "the Mandarin attacks", Predicate(actors=("mandarin",), kinds=("attack",))
    )
    reserve(
        table, ActionSpec("attack", "standard", "hurls his shield", ("mandarin",)), mandarin_attacks
    )
    table.end_turn()
    reserve(table, ActionSpec("escape", description="elbows her way free"), mandarin_attacks)
    table.end_turn()
    reserve(
        table,
        ActionSpec("attack", description="disintegrate", targets=("carter",)),
        Trigger("the time for talk is over"),
    )
    # Fresh checks in claim order (initiative order): Captain America 18, Carter 19, Mandarin 15.
    dice.push(6, 5, 4, 6, 5, 5, 5, 4, 4)
    facts = TriggerFacts("attack", "mandarin", "attack", ("carter",), text="attacks Carter")
    table.do(c.AnnounceTrigger(facts, offer=("mandarin",)))

    assert [e.claim.combatant for e in table.of(ev.ReactionClaimed)] == [
        "cap",
        "carter",
        "mandarin",
    ]
    (ordered,) = table.of(ev.SequenceOrdered)
    assert {i: check.total for i, check in ordered.checks} == {
        "carter": 19,
        "cap": 18,
        "mandarin": 15,
    }
    assert ordered.sequence == ("carter", "cap", "mandarin")
    assert table.of(ev.ReactionStarted)[0].combatant == "carter"
    assert table.by(NAME) == ["claim_reaction"] * 3
    assert table.problems == []


def test_r11_an_auto_readied_action_is_claimed_and_goes_before_the_spell(
    turnkeeper_table: TableFactory,
) -> None:
    table, _ = table_of(turnkeeper_table, "dnd3e")
    table.add("fighter", init_mod=1, tags=("auto",))
    table.add("goblin", init_mod=2)
    table.add("orc")
    table.do(c.RollInitiative("fighter", faces=(19,)))  # 20
    table.do(c.RollInitiative("goblin", faces=(13,)))  # 15
    table.do(c.RollInitiative("orc", faces=(10,)))  # 10
    table.start()
    spell = Trigger("if the orc starts casting", Predicate(actors=("orc",), kinds=("cast",)))
    reserve(table, ActionSpec("attack", targets=("orc",)), spell)
    table.end_turn()
    table.end_turn()
    events = table.do(c.DeclareAction(table.turn(), ActionSpec("cast")))
    assert "reaction_started" in names(events)
    assert "action_resolved" not in names(events)
    window = table.state.window
    assert window is not None
    finished = table.do(c.FinishReaction(window.id, "fighter"))
    (moved,) = [e for e in finished if isinstance(e, ev.PlaceChanged)]
    assert (moved.combatant, moved.place, moved.order) == (
        "fighter",
        10,
        ("goblin", "fighter", "orc"),
    )
    assert names(finished)[-1] == "action_resolved"
    assert table.problems == []


def test_r12_an_auto_combatant_with_nothing_to_claim_passes(
    turnkeeper_table: TableFactory,
) -> None:
    table = cap_and_hydra(turnkeeper_table, "auto")
    reserve(table, PUNCH, CORNER)
    table.end_turn()
    # The narrator offers Captain America a moment his trigger does not fit: he passes.
    facts = TriggerFacts("shout", "agent", "speak", text="the agent calls for backup")
    events = table.do(c.AnnounceTrigger(facts, offer=("cap",)))
    assert names(events) == ["window_opened", "reaction_passed", "window_closed"]
    assert table.by(NAME) == ["pass_reaction"]
    assert [r.combatant for r in table.state.reservations] == ["cap"]  # still his


# ------------------------------------------------------------------------- standing reactions


def avengers(turnkeeper_table: TableFactory, *cap_tags: str, **options: OptionValue) -> Table:
    """Captain America (20) and Bucky (19) against Crossbones (15) and Zemo (14)."""
    table, _ = table_of(turnkeeper_table, **options)
    table.add("cap", player_character=True, init_mod=3, tags=("auto", *cap_tags))
    table.add("bucky", player_character=True, init_mod=3)
    table.add("crossbones", init_mod=2)
    table.add("zemo", init_mod=2)
    table.do(c.RollInitiative("cap", faces=(6, 6, 5)))
    table.do(c.RollInitiative("bucky", faces=(6, 6, 4)))
    table.do(c.RollInitiative("crossbones", faces=(5, 4, 4)))
    table.do(c.RollInitiative("zemo", faces=(4, 4, 4)))
    table.start()
    table.end_turn()
    table.end_turn()
    assert table.turn().combatant == "crossbones"
    return table


def attack(table: Table, target: str) -> list[ev.Event]:
    return table.do(c.DeclareAction(table.turn(), ActionSpec("attack", targets=(target,))))


def test_r10_standing_interpose_comes_right_after_an_attack_that_opened_no_window(
    turnkeeper_table: TableFactory,
) -> None:
    table = avengers(turnkeeper_table, "react:interpose:attack:ally")
    events = attack(table, "bucky")
    assert names(events) == [
        "action_declared",
        "action_resolved",
        "window_opened",
        "reaction_claimed",
        "reaction_spent",
        "window_closed",
        "sequence_ordered",
        "reaction_started",
    ]
    (opened,) = table.of(ev.WindowOpened)
    assert opened.window.facts == TriggerFacts(
        STANDING_EVENT,
        "crossbones",
        "attack",
        ("bucky",),
        text="standing reactions to crossbones's attack",
    )
    assert opened.window.offered == ("cap",)
    (started,) = table.of(ev.ReactionStarted)
    assert started.action == ActionSpec(
        "interpose",
        "standard",
        "",
        ("crossbones",),
        ("auto", "standing"),
    )
    assert table.by(NAME) == ["announce_trigger", "claim_reaction"]
    assert table.problems == []


def test_r12_standing_interpose_goes_before_the_attack_when_the_table_waits(
    turnkeeper_table: TableFactory,
) -> None:
    table = avengers(turnkeeper_table, "react:interpose:attack:ally", window_deadline=5.0)
    events = attack(table, "bucky")
    assert names(events) == [
        "action_declared",
        "window_opened",
        "reaction_claimed",
        "reaction_spent",
    ]
    events = table.advance(5)
    assert names(events) == ["window_closed", "sequence_ordered", "reaction_started"]
    finished = table.do(c.FinishReaction(table.of(ev.WindowOpened)[0].window.id, "cap"))
    assert names(finished) == ["reaction_finished", "sequence_ended", "action_resolved"]
    assert table.by(NAME) == ["claim_reaction"]


def test_r10_a_standing_reaction_needs_the_reaction_still_available(
    turnkeeper_table: TableFactory,
) -> None:
    table = avengers(turnkeeper_table, "react:interpose:attack:ally")
    attack(table, "bucky")
    window = table.state.window
    assert window is not None
    table.do(c.FinishReaction(window.id, "cap"))
    table.end_turn()  # Crossbones
    attack(table, "bucky")  # Zemo: Captain America has spent his reaction this round
    assert table.by(NAME) == ["announce_trigger", "claim_reaction"]


@pytest.mark.parametrize(
    ("tag", "action", "reacts"),
    [
        ("react:interpose:attack:ally", ActionSpec("attack", targets=("bucky",)), True),
        ("react:interpose:attack:ally", ActionSpec("attack", targets=("cap",)), False),
        ("react:attack:attack:self", ActionSpec("attack", targets=("cap",)), True),
        ("react:attack:attack:self", ActionSpec("attack", targets=("bucky",)), False),
        ("react:help:attack:bucky", ActionSpec("attack", targets=("bucky",)), True),
        ("react:attack:any:any", ActionSpec("move"), True),
        ("react:attack:move:any", ActionSpec("power"), False),
        ("react:interpose", ActionSpec("attack", targets=("bucky",)), False),
    ],
)
def test_r10_a_standing_reaction_fits_its_trigger_kind_and_whom(
    turnkeeper_table: TableFactory, tag: str, action: ActionSpec, reacts: bool
) -> None:
    table = avengers(turnkeeper_table, tag)
    table.do(c.DeclareAction(table.turn(), action))
    assert bool(table.of(ev.ReactionClaimed)) is reacts
    assert table.problems == []


def test_r10_allies_actions_call_for_no_standing_reaction(turnkeeper_table: TableFactory) -> None:
    table, _ = table_of(turnkeeper_table)
    table.add("cap", player_character=True, init_mod=3, tags=("auto", "react:attack:any:any"))
    table.add("bucky", player_character=True, init_mod=3)
    table.add("zemo", init_mod=2, tags=("side:players",))  # a turncoat, on their side now
    table.do(c.RollInitiative("cap", faces=(6, 6, 5)))
    table.do(c.RollInitiative("bucky", faces=(6, 6, 4)))
    table.do(c.RollInitiative("zemo", faces=(4, 4, 4)))
    table.start()
    table.end_turn()
    attack(table, "zemo")  # Bucky
    table.end_turn()
    attack(table, "bucky")  # Zemo
    assert table.by(NAME) == []


def test_r11_dnd3e_has_no_standing_reactions(turnkeeper_table: TableFactory) -> None:
    table, _ = table_of(turnkeeper_table, "dnd3e")
    table.add("fighter", player_character=True, tags=("auto", "react:attack:attack:ally"))
    table.add("wizard", player_character=True)
    table.add("orc")
    table.do(c.RollInitiative("orc", faces=(20,)))
    table.do(c.RollInitiative("fighter", faces=(10,)))
    table.do(c.RollInitiative("wizard", faces=(5,)))
    table.start()
    attack(table, "wizard")
    assert table.by(NAME) == []


def test_auto_reactions_is_an_installed_entry_point() -> None:
    (point,) = entry_points(group="turnkeeper.plugins", name=NAME)
    assert point.load() is turnkeeper_auto_reactions.plugin
    assert point.dist is not None
    assert (point.dist.name, point.dist.version) == ("turnkeeper-auto-reactions", "0.1.0")


def test_r16_nobody_reacts_to_what_its_player_cannot_see(turnkeeper_table: TableFactory) -> None:
    table, _ = table_of(turnkeeper_table)
    table.add("cap", player_character=True, controller="steve", init_mod=3, tags=("auto",))
    table.add(
        "bucky",
        player_character=True,
        controller="james",
        tags=("auto", "react:attack:attack:self"),
    )
    table.add("ghost", init_mod=2, hidden=True)
    table.do(c.RollInitiative("cap", faces=(6, 6, 5)))
    table.do(c.RollInitiative("bucky", faces=(6, 6, 4)))
    table.do(c.RollInitiative("ghost", faces=(4, 4, 4)))
    table.start()
    reserve(table, PUNCH, Trigger("whoever attacks Bucky", Predicate(targets=("bucky",))))
    table.end_turn()
    table.end_turn()
    # The hidden Ghost attacks Bucky: Captain America's reservation would match, but neither
    # player can see the Ghost (R16): the engine offers no window, and the plugin announces none
    # for Bucky's standing reaction.
    events = attack(table, "bucky")
    assert names(events) == ["action_declared", "action_resolved"]
    assert table.by(NAME) == []
