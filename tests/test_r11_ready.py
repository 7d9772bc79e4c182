"""R11 Readying an action (dnd3e): it goes before its trigger and moves the readier."""

from __future__ import annotations

from story import Story, names, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Reservation, Trigger

SPELL = Trigger("if the orc starts casting a spell", Predicate(actors=("orc",), kinds=("cast",)))
HIT = ActionSpec("attack", description="disrupt the spell", targets=("orc",))


def fight(*rolls: tuple[str, int]) -> Story:
    story = Story("dnd3e")
    for cid, face in rolls:
        story.add(cid)
        story.roll(cid, face)
    story.do(c.StartCombat())
    return story


def ready(story: Story, trigger: Trigger = SPELL, action: ActionSpec = HIT) -> Reservation:
    events = story.do(c.Reserve(story.turn, "standard", action, trigger))
    return of(events, ev.ActionReserved)[0].reservation


def cast(story: Story) -> list[ev.Event]:
    return story.do(c.DeclareAction(story.turn, ActionSpec("cast", description="fireball")))


def test_r11_ready_is_a_standard_action() -> None:
    story = fight(("fighter", 20), ("orc", 10))
    r = ready(story)
    assert (r.mode, r.reserved_type, r.action.type) == ("ready", "standard", "standard")
    assert story.state.turn is not None
    assert story.state.turn.used == ("standard",)
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("attack")))
    assert error.code == "action_unavailable"
    story.do(c.DeclareAction(story.turn, ActionSpec("move")))


def test_r11_readied_action_resolves_before_triggering_action() -> None:
    story = fight(("fighter", 20), ("goblin", 15), ("orc", 10))
    r = ready(story)
    story.end_turn()
    story.end_turn()
    orc_turn = story.turn
    events = cast(story)
    assert names(events) == ["action_declared", "window_opened"]
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ("fighter",)
    events = story.do(c.ClaimReaction(window.id, "fighter", reservation=r.id))
    assert of(events, ev.ReactionStarted)[0].action == r.action
    assert "action_resolved" not in names(events)
    assert "reaction_spent" not in names(events)  # dnd3e readied actions cost no reaction
    events = story.do(c.FinishReaction(window.id, "fighter"))
    assert names(events) == [
        "reaction_finished",
        "place_changed",
        "sequence_ended",
        "action_resolved",
    ]
    assert of(events, ev.ActionResolved)[0].combatant == "orc"
    assert story.turn == orc_turn


def test_r11_readier_place_immediately_ahead_of_trigger_at_that_count() -> None:
    story = fight(("fighter", 20), ("goblin", 15), ("orc", 10))
    r = ready(story)
    story.end_turn()
    story.end_turn()
    window = of(cast(story), ev.WindowOpened)[0].window
    story.do(c.ClaimReaction(window.id, "fighter", reservation=r.id))
    events = story.do(c.FinishReaction(window.id, "fighter"))
    changed = of(events, ev.PlaceChanged)[0]
    assert (changed.combatant, changed.place) == ("fighter", 10)
    assert changed.order == ("goblin", "fighter", "orc")
    assert of(events, ev.TurnForgone) == []  # same round: nothing is lost
    events = story.end_turn()  # the orc's turn ends: no second turn for the fighter
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]
    assert story.run_round() == ["goblin", "fighter", "orc"]
    assert story.run_round() == ["goblin", "fighter", "orc"]


def later_round() -> tuple[Story, Reservation]:
    """Orc 20, fighter 15, goblin 10: the fighter readies in round 1 against the orc, whose
    round-2 turn comes before the fighter's normal place."""
    story = fight(("orc", 20), ("fighter", 15), ("goblin", 10))
    story.end_turn()
    r = ready(story)
    story.end_turn()
    events = story.end_turn()
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]
    assert story.current == "orc"
    return story, r


def test_r11_trigger_in_later_round_taken_place_rises_and_no_regular_turn() -> None:
    story, r = later_round()
    window = of(cast(story), ev.WindowOpened)[0].window
    story.do(c.ClaimReaction(window.id, "fighter", reservation=r.id))
    events = story.do(c.FinishReaction(window.id, "fighter"))
    changed = of(events, ev.PlaceChanged)[0]
    assert (changed.combatant, changed.place, changed.order) == (
        "fighter",
        20,
        ("fighter", "orc", "goblin"),
    )
    assert [(e.combatant, e.round) for e in of(events, ev.TurnForgone)] == [("fighter", 2)]
    assert of(events, ev.ActionResolved)[0].combatant == "orc"
    events = story.end_turn()
    assert [e.combatant for e in of(events, ev.TurnStarted)] == ["goblin"]
    events = story.end_turn()
    assert [e.round for e in of(events, ev.RoundStarted)] == [3]
    assert story.run_round() == ["fighter", "orc", "goblin"]


def test_r11_trigger_in_later_round_passed_place_rises_and_no_regular_turn() -> None:
    story, r = later_round()
    window = of(cast(story), ev.WindowOpened)[0].window
    events = story.do(c.PassReaction(window.id, "fighter"))
    assert [e.reservation for e in of(events, ev.ReservationUsed)] == [r.id]
    changed = of(events, ev.PlaceChanged)[0]
    assert (changed.combatant, changed.place) == ("fighter", 20)
    assert [(e.combatant, e.round) for e in of(events, ev.TurnForgone)] == [("fighter", 2)]
    assert of(events, ev.ReactionStarted) == []
    assert of(events, ev.ActionResolved)[0].combatant == "orc"
    events = story.end_turn()
    assert [e.combatant for e in of(events, ev.TurnStarted)] == ["goblin"]
    story.end_turn()
    assert story.run_round() == ["fighter", "orc", "goblin"]


def test_r11_pass_in_same_round_keeps_place() -> None:
    story = fight(("fighter", 20), ("goblin", 15), ("orc", 10))
    ready(story)
    story.end_turn()
    story.end_turn()
    window = of(cast(story), ev.WindowOpened)[0].window
    events = story.do(c.PassReaction(window.id, "fighter"))
    assert of(events, ev.PlaceChanged) == []
    assert of(events, ev.TurnForgone) == []
    assert story.state.order == ("fighter", "goblin", "orc")
    assert story.state.get("fighter").place == 20  # type: ignore[union-attr]


def test_r11_unused_readied_action_expires_at_next_turn() -> None:
    story = fight(("fighter", 20), ("orc", 10))
    r = ready(story)
    story.end_turn()
    story.do(c.DeclareAction(story.turn, ActionSpec("attack", targets=("fighter",))))
    events = story.end_turn()
    assert story.current == "fighter"
    expired = of(events, ev.ReservationExpired)
    assert [(e.combatant, e.reservation) for e in expired] == [("fighter", r.id)]
    assert names(events).index("reservation_expired") < names(events).index("turn_started")
    assert story.state.reservations == ()
    assert story.state.order == ("fighter", "orc")


def test_r11_several_readied_actions_resolve_in_initiative_order() -> None:
    story = fight(("archer", 20), ("fighter", 15), ("orc", 10))
    archer = ready(story, action=ActionSpec("attack", description="arrow", targets=("orc",)))
    story.end_turn()
    fighter = ready(story)
    story.end_turn()
    window = of(cast(story), ev.WindowOpened)[0].window
    assert window.offered == ("archer", "fighter")
    story.do(c.ClaimReaction(window.id, "fighter", reservation=fighter.id))
    events = story.do(c.ClaimReaction(window.id, "archer", reservation=archer.id))
    sequence = of(events, ev.SequenceOrdered)[0]
    assert (sequence.sequence, sequence.checks) == (("archer", "fighter"), ())
    assert of(events, ev.ReactionStarted)[0].combatant == "archer"
    error = story.refuse(c.FinishReaction(window.id, "fighter"))
    assert error.code == "not_reacting"
    events = story.do(c.FinishReaction(window.id, "archer"))
    assert of(events, ev.ReactionStarted)[0].combatant == "fighter"
    assert "action_resolved" not in names(events)
    events = story.do(c.FinishReaction(window.id, "fighter"))
    assert names(events)[-1] == "action_resolved"
    assert story.state.order[-1] == "orc"
    assert set(story.state.order[:2]) == {"archer", "fighter"}
