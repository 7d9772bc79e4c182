"""R10 Reserving an action (marvel): a standard or movement action kept for a trigger."""

from __future__ import annotations

import pytest

from story import Story, names, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Reservation, Trigger, TriggerFacts

PUNCH = ActionSpec("attack", description="punch whoever comes round the corner")
CORNER = Trigger("anyone comes round the corner", Predicate(events=("move",), actors=("hydra",)))


def hydra_base(*extra: str) -> Story:
    """The seed's example: Captain America 18, then (optionally Zola 12), then a Hydra agent 9.
    Round 1, Cap's turn."""
    story = Story("marvel")
    story.add("cap", "Captain America", init_mod=3)
    story.roll("cap", 4, 5, 6)
    if "zola" in extra:
        story.add("zola", "Arnim Zola", tags=("scientist",))
        story.roll("zola", 3, 4, 5)
    story.add("hydra", "Hydra agent", tags=("hydra",))
    story.roll("hydra", 2, 3, 4)
    story.do(c.StartCombat())
    assert story.current == "cap"
    return story


def reserve(
    story: Story, reserved_type: str = "standard", action: ActionSpec = PUNCH, trigger=CORNER
) -> Reservation:
    events = story.do(c.Reserve(story.turn, reserved_type, action, trigger))
    return of(events, ev.ActionReserved)[0].reservation


def act(story: Story, action: ActionSpec) -> list[ev.Event]:
    return story.do(c.DeclareAction(story.turn, action))


def test_r10_reserve_instead_of_standard_action() -> None:
    story = hydra_base()
    story.do(c.DeclareAction(story.turn, ActionSpec("move", description="races round a corner")))
    reserve(story, "standard")
    assert story.state.turn is not None
    assert story.state.turn.used == ("movement", "standard")
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("attack")))
    assert error.code == "action_unavailable"


def test_r10_reserve_instead_of_movement_action() -> None:
    story = hydra_base()
    reserve(story, "movement", ActionSpec("move", description="dive for cover"))
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("dash")))
    assert error.code == "action_unavailable"
    act(story, ActionSpec("attack"))  # the standard action is still there
    error = story.refuse(c.Reserve(story.turn, "standard", PUNCH, CORNER))
    assert error.code == "action_unavailable"


def test_r10_reservation_records_action_type_and_trigger() -> None:
    story = hydra_base()
    action = ActionSpec("attack", description="shield throw", targets=("hydra",))
    trigger = Trigger(
        "the agent goes for the alarm",
        Predicate(actors=("hydra",), kinds=("use_item",), targets=("cap",), zones=("hall",)),
    )
    r = reserve(story, "standard", action, trigger)
    assert (r.combatant, r.round, r.mode, r.reserved_type) == ("cap", 1, "reserve", "standard")
    assert r.action == ActionSpec(
        "attack", "standard", description="shield throw", targets=("hydra",)
    )
    assert r.trigger == trigger
    assert story.state.reservations == (r,)


def test_r10_movement_cannot_reserve_an_attack() -> None:
    story = hydra_base()
    error = story.refuse(c.Reserve(story.turn, "movement", PUNCH, CORNER))
    assert (error.code, error.field) == ("action_type_mismatch", "action.kind")
    error = story.refuse(c.Reserve(story.turn, "movement", ActionSpec("grab"), CORNER))
    assert error.code == "action_type_mismatch"


def test_r10_trigger_claim_spends_reaction_interrupts_then_turn_resumes() -> None:
    story = hydra_base()
    r = reserve(story)
    story.end_turn()
    hydra_turn = story.turn
    events = act(story, ActionSpec("move", description="comes round the corner"))
    assert names(events) == ["action_declared", "window_opened"]
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ("cap",)
    events = story.do(c.ClaimReaction(window.id, "cap", reservation=r.id))
    assert names(events) == [
        "reaction_claimed",
        "reaction_spent",
        "reservation_used",
        "window_closed",
        "sequence_ordered",
        "reaction_started",
    ]
    assert of(events, ev.ReactionStarted)[0].action == r.action
    assert story.state.get("cap").reaction is False  # type: ignore[union-attr]
    assert story.turn == hydra_turn  # interrupted, not ended
    events = story.do(c.FinishReaction(window.id, "cap"))
    assert names(events) == ["reaction_finished", "sequence_ended", "action_resolved"]
    assert story.turn == hydra_turn
    act(story, ActionSpec("attack", targets=("cap",)))  # the Hydra agent's turn goes on
    assert story.state.turn is not None
    assert story.state.turn.used == ("movement", "standard")


def test_r10_claim_without_reaction_is_no_reaction() -> None:
    story = hydra_base("zola")
    r = reserve(story)
    story.end_turn()
    reserve(story, trigger=CORNER)  # Zola waits for the same thing
    story.end_turn()
    # Cap uses his reaction on something else first.
    story.do(c.AnnounceTrigger(TriggerFacts("announced", text="a guard shouts"), ("cap",)))
    window = story.state.window
    assert window is not None
    story.do(c.ClaimReaction(window.id, "cap", action=ActionSpec("attack")))
    story.do(c.FinishReaction(window.id, "cap"))
    events = act(story, ActionSpec("move"))
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ("zola",)  # Cap cannot take it, so it is not offered
    error = story.refuse(c.ClaimReaction(window.id, "cap", reservation=r.id))
    assert (error.code, error.field) == ("no_reaction", "combatant")
    assert r in story.state.reservations


def test_r10_place_unchanged_after_reserved_action() -> None:
    story = hydra_base("zola")
    r = reserve(story)
    story.end_turn()
    story.end_turn()
    events = act(story, ActionSpec("move"))
    window = of(events, ev.WindowOpened)[0].window
    story.do(c.ClaimReaction(window.id, "cap", reservation=r.id))
    events = story.do(c.FinishReaction(window.id, "cap"))
    assert of(events, ev.PlaceChanged) == []
    assert story.state.order == ("cap", "zola", "hydra")
    assert story.state.get("cap").place == 18  # type: ignore[union-attr]
    story.end_turn()
    assert story.run_round() == ["cap", "zola", "hydra"]


def test_r10_unused_reservation_expires_at_next_turn_start() -> None:
    story = hydra_base()
    r = reserve(story)
    story.end_turn()
    act(story, ActionSpec("attack", targets=("cap",)))  # not the trigger: no window
    events = story.end_turn()
    assert story.current == "cap"
    expired = of(events, ev.ReservationExpired)
    assert [(e.combatant, e.reservation) for e in expired] == [("cap", r.id)]
    assert names(events).index("reservation_expired") < names(events).index("turn_started")
    assert story.state.reservations == ()
    story.end_turn()
    events = act(story, ActionSpec("move"))  # the trigger, too late
    assert "window_opened" not in names(events)
    assert "action_resolved" in names(events)


def test_r10_trigger_before_next_turn_can_be_claimed_in_the_following_round() -> None:
    # Reserved in round 1 after the trigger actor's turn: it holds until Cap's next turn.
    story = Story("marvel")
    story.add("hydra", tags=("hydra",))
    story.roll("hydra", 6, 6, 6)
    story.add("cap", init_mod=3)
    story.roll("cap", 2, 3, 4)
    story.do(c.StartCombat())
    story.end_turn()
    assert story.current == "cap"
    r = reserve(story)
    story.end_turn()
    assert (story.state.round, story.current) == (2, "hydra")
    events = act(story, ActionSpec("move"))
    window = of(events, ev.WindowOpened)[0].window
    assert window.offered == ("cap",)
    events = story.do(c.ClaimReaction(window.id, "cap", reservation=r.id))
    assert of(events, ev.ReactionStarted)[0].combatant == "cap"


HIT_MISS = {
    "actors": (
        # Only moves, or the Hydra agent's turn starting would match too (R12).
        Predicate(actors=("hydra",), events=("move",)),
        ActionSpec("move"),
        ActionSpec("move"),
    ),
    "kinds": (
        Predicate(kinds=("use_item",)),
        ActionSpec("move"),
        ActionSpec("use_item", description="the alarm"),
    ),
    "targets": (
        Predicate(targets=("cap",)),
        ActionSpec("attack", targets=("hydra",)),
        ActionSpec("attack", targets=("cap",)),
    ),
    "tags": (
        Predicate(tags=("hydra",)),
        ActionSpec("move"),
        ActionSpec("move"),
    ),
    "action_tags": (
        Predicate(tags=("loud",)),
        ActionSpec("move"),
        ActionSpec("move", tags=("loud",)),
    ),
    "zones": (
        Predicate(zones=("corridor",)),
        ActionSpec("move", zone="lab"),
        ActionSpec("move", zone="corridor"),
    ),
    "events": (
        Predicate(events=("move",)),
        ActionSpec("attack", targets=("cap",)),
        ActionSpec("move"),
    ),
}


@pytest.mark.parametrize("field", list(HIT_MISS))
def test_r10_trigger_predicate_fields_match(field: str) -> None:
    """Zola's action misses the predicate, the Hydra agent's (tagged ``hydra``) hits it."""
    predicate, miss, hit = HIT_MISS[field]
    story = hydra_base("zola")
    reserve(story, trigger=Trigger("when it fits", predicate))
    story.end_turn()
    events = act(story, miss)
    assert "window_opened" not in names(events)
    assert of(events, ev.ActionResolved)[0].combatant == "zola"
    story.end_turn()
    events = act(story, hit)
    assert of(events, ev.WindowOpened)[0].window.offered == ("cap",)
    assert "action_resolved" not in names(events)


def test_r10_trigger_without_predicate_is_offered_by_the_narrator() -> None:
    story = hydra_base()
    r = reserve(story, trigger=Trigger("someone comes round the corner"))
    story.end_turn()
    events = act(story, ActionSpec("move"))
    assert "window_opened" not in names(events)  # no predicate: the engine cannot tell
    facts = TriggerFacts("announced", actor="hydra", text="the agent comes round the corner")
    events = story.do(c.AnnounceTrigger(facts, ("cap",)))
    window = of(events, ev.WindowOpened)[0].window
    story.do(c.ClaimReaction(window.id, "cap", reservation=r.id))
    assert story.state.reservations == ()
