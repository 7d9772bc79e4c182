"""R6 Action economy: what a turn may spend, reactions, and the action catalogues."""

from __future__ import annotations

from story import Story, names, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Trigger, TriggerFacts


def marvel(**options: object) -> Story:
    """Ana (15), Ben (12), Cal (9), in that order; nobody Fantastic."""
    story = Story("marvel", **options)
    for cid, faces in (("ana", (4, 5, 6)), ("ben", (3, 4, 5)), ("cal", (2, 3, 4))):
        story.add(cid)
        story.roll(cid, *faces)
    story.do(c.StartCombat())
    return story


def dnd(**options: object) -> Story:
    """Ana (18), Ben (12), Cal (6), in that order."""
    story = Story("dnd3e", **options)
    for cid, face in (("ana", 18), ("ben", 12), ("cal", 6)):
        story.add(cid)
        story.roll(cid, face)
    story.do(c.StartCombat())
    return story


def act(story: Story, kind: str, type_: str | None = None) -> list[ev.Event]:
    return story.do(c.DeclareAction(story.turn, ActionSpec(kind, type_)))


def refused(story: Story, kind: str, type_: str | None = None) -> str:
    return story.refuse(c.DeclareAction(story.turn, ActionSpec(kind, type_))).code


def react(story: Story, who: str) -> None:
    """The narrator names a moment and offers it to ``who``, who reacts and finishes."""
    story.do(c.AnnounceTrigger(TriggerFacts("announced", text="a door bursts open"), (who,)))
    window = story.state.window
    assert window is not None
    story.do(c.ClaimReaction(window.id, who, action=ActionSpec("attack", description="shoot")))
    story.do(c.FinishReaction(window.id, who))


def reaction(story: Story, who: str) -> bool:
    combatant = story.state.get(who)
    assert combatant is not None
    return combatant.reaction


# ------------------------------------------------------------------------------------ marvel


def test_r6_marvel_one_standard_action_per_turn() -> None:
    story = marvel()
    declared = of(act(story, "attack"), ev.ActionDeclared)
    assert declared[0].action.type == "standard"
    assert refused(story, "power") == "action_unavailable"
    act(story, "move")  # the movement action is still there


def test_r6_marvel_one_movement_action_per_turn() -> None:
    story = marvel()
    declared = of(act(story, "move"), ev.ActionDeclared)
    assert declared[0].action.type == "movement"
    assert refused(story, "dash") == "action_unavailable"
    act(story, "attack")
    assert story.state.turn is not None
    assert story.state.turn.used == ("movement", "standard")


def test_r6_marvel_budget_is_fresh_each_turn() -> None:
    story = marvel()
    act(story, "attack")
    act(story, "move")
    story.end_turn()
    assert story.current == "ben"
    act(story, "attack")
    act(story, "move")


def test_r6_marvel_reaction_refreshes_at_start_of_own_turn() -> None:
    story = marvel()
    react(story, "cal")  # in Ana's turn
    assert not reaction(story, "cal")
    story.end_turn()  # Ben's turn starts: not Cal's, so nothing comes back
    assert story.current == "ben"
    assert not reaction(story, "cal")
    events = story.end_turn()
    assert story.current == "cal"
    refreshed = of(events, ev.ReactionRefreshed)
    assert [e.combatant for e in refreshed] == ["cal"]
    assert names(events).index("reaction_refreshed") < names(events).index("turn_started")
    assert reaction(story, "cal")


def test_r6_marvel_reaction_not_back_at_round_start_by_default() -> None:
    story = marvel()
    story.end_turn()
    story.end_turn()
    react(story, "ben")  # round 1, Cal's turn, after Ben's own turn
    events = story.end_turn()  # round 2 starts with Ana
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]
    assert of(events, ev.ReactionRefreshed) == []
    assert not reaction(story, "ben")
    events = story.end_turn()  # Ben's own turn
    assert [e.combatant for e in of(events, ev.ReactionRefreshed)] == ["ben"]
    assert reaction(story, "ben")


def test_r6_marvel_reaction_refresh_round_start_option() -> None:
    story = marvel(reaction_refresh="round_start")
    react(story, "cal")  # round 1, Ana's turn
    story.end_turn()
    events = story.end_turn()  # Cal's own turn starts: under round_start it gets nothing back
    assert story.current == "cal"
    assert of(events, ev.ReactionRefreshed) == []
    assert not reaction(story, "cal")
    events = story.end_turn()  # round 2 starts
    assert story.state.round == 2
    refreshed = of(events, ev.ReactionRefreshed)
    assert [e.combatant for e in refreshed] == ["cal"]
    assert names(events).index("round_started") < names(events).index("reaction_refreshed")
    assert reaction(story, "cal")


def test_r6_marvel_no_second_reaction_before_refresh() -> None:
    story = marvel()
    react(story, "cal")
    story.do(c.AnnounceTrigger(TriggerFacts("announced", text="again"), ("ben",)))
    window = story.state.window
    assert window is not None
    error = story.refuse(c.ClaimReaction(window.id, "cal", action=ActionSpec("attack")))
    assert error.code == "no_reaction"


def test_r6_marvel_catalogue_maps_kinds_to_types() -> None:
    story = marvel()
    assert of(act(story, "grab"), ev.ActionDeclared)[0].action.type == "standard"
    assert of(act(story, "stand"), ev.ActionDeclared)[0].action.type == "movement"


def test_r6_marvel_unknown_kind_must_state_its_type() -> None:
    story = marvel()
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("juggle")))
    assert (error.code, error.field) == ("unknown_action_kind", "action.kind")
    declared = of(act(story, "juggle", "standard"), ev.ActionDeclared)
    assert declared[0].action.type == "standard"
    assert refused(story, "attack") == "action_unavailable"  # the stated type was spent


def test_r6_marvel_stated_type_contradicting_catalogue_is_mismatch() -> None:
    story = marvel()
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("attack", "movement")))
    assert error.code == "action_type_mismatch"
    assert of(act(story, "attack", "standard"), ev.ActionDeclared)[0].action.type == "standard"


def test_r6_marvel_outside_bonus_round_may_react_during_it() -> None:
    story = Story("marvel")
    story.add("ana")
    story.add("ben")
    story.roll("ana", 3, 4, 1)  # M: Fantastic
    story.roll("ben", 5, 5, 5)
    story.do(c.StartCombat())
    assert story.state.round == 0
    assert story.state.bonus == ("ana",)
    assert story.current == "ana"
    story.do(c.AnnounceTrigger(TriggerFacts("announced", actor="ana", text="Ana leaps"), ("ben",)))
    window = story.state.window
    assert window is not None
    assert window.offered == ("ben",)
    events = story.do(c.ClaimReaction(window.id, "ben", action=ActionSpec("attack")))
    assert [e.combatant for e in of(events, ev.ReactionStarted)] == ["ben"]
    assert of(events, ev.ReactionSpent)[0].combatant == "ben"
    story.do(c.FinishReaction(window.id, "ben"))
    assert story.current == "ana"
    assert story.state.round == 0


# ------------------------------------------------------------------------------------- dnd3e


def test_r6_dnd3e_standard_and_move_per_turn() -> None:
    story = dnd()
    assert of(act(story, "attack"), ev.ActionDeclared)[0].action.type == "standard"
    assert of(act(story, "move"), ev.ActionDeclared)[0].action.type == "move"
    assert refused(story, "cast") == "action_unavailable"
    assert refused(story, "draw_weapon") == "action_unavailable"


def test_r6_dnd3e_one_full_round_action_instead() -> None:
    story = dnd()
    assert of(act(story, "full_attack"), ev.ActionDeclared)[0].action.type == "full"
    assert refused(story, "move") == "action_unavailable"
    assert refused(story, "attack") == "action_unavailable"
    story.end_turn()
    act(story, "move")
    assert refused(story, "charge") == "action_unavailable"


def test_r6_dnd3e_free_actions_unlimited() -> None:
    story = dnd()
    for _ in range(3):
        assert of(act(story, "speak"), ev.ActionDeclared)[0].action.type == "free"
    act(story, "full_attack")  # free actions do not use up the full round
    act(story, "drop_item")
    act(story, "speak")


def test_r6_dnd3e_second_move_in_place_of_standard() -> None:
    story = dnd()
    act(story, "move")
    act(story, "move")
    assert refused(story, "attack") == "action_unavailable"
    assert refused(story, "move") == "action_unavailable"
    story.end_turn()
    act(story, "attack")
    act(story, "move")
    assert refused(story, "move") == "action_unavailable"


def test_r6_dnd3e_ready_is_standard_so_readier_can_still_move() -> None:
    story = dnd()
    story.do(
        c.Reserve(
            story.turn, "standard", ActionSpec("attack", targets=("ben",)), Trigger("Ben moves")
        )
    )
    assert story.state.turn is not None
    assert story.state.turn.used == ("standard",)
    assert refused(story, "attack") == "action_unavailable"
    act(story, "move")
    error = story.refuse(
        c.Reserve(story.turn, "standard", ActionSpec("attack"), Trigger("Cal moves"))
    )
    assert error.code == "action_unavailable"


def test_r6_dnd3e_ready_is_not_a_move_action() -> None:
    story = dnd()
    error = story.refuse(c.Reserve(story.turn, "move", ActionSpec("move"), Trigger("Ben moves")))
    assert error.code == "invalid_action_type"


def test_r6_dnd3e_delay_is_no_action() -> None:
    story = dnd()
    held = story.do(c.Hold(story.turn))
    assert of(held, ev.TurnHeld)[0].combatant == "ana"
    assert story.current == "ben"
    story.do(c.TakeHeldTurn("ana", "after", "ben"))
    story.end_turn()
    assert story.state.turn is not None
    assert (story.current, story.state.turn.kind) == ("ana", "held")
    act(story, "full_attack")  # the whole budget is still there


def test_r6_dnd3e_refocus_is_full_round_without_movement() -> None:
    story = dnd()
    events = story.do(c.Refocus(story.turn))
    assert of(events, ev.ActionDeclared)[0].action.type == "full"
    assert refused(story, "move") == "action_unavailable"
    assert refused(story, "draw_weapon") == "action_unavailable"
    story.end_turn()
    act(story, "move")
    assert story.refuse(c.Refocus(story.turn)).code == "action_unavailable"


def test_r6_marvel_has_no_refocus() -> None:
    story = marvel()
    assert story.refuse(c.Refocus(story.turn)).code == "not_in_ruleset"


def test_r6_dnd3e_ready_3_0_only_partial_actions() -> None:
    story = dnd()
    for kind in ("speak", "charge"):
        error = story.refuse(c.Reserve(story.turn, "standard", ActionSpec(kind), Trigger("now")))
        assert error.code == "action_type_mismatch", kind
    story.do(c.Reserve(story.turn, "standard", ActionSpec("move"), Trigger("Ben moves")))
    story.end_turn()
    story.do(c.Reserve(story.turn, "standard", ActionSpec("attack"), Trigger("Cal moves")))


def test_r6_dnd3e_ready_3_5_also_free_actions() -> None:
    story = dnd(ready="3.5")
    error = story.refuse(c.Reserve(story.turn, "standard", ActionSpec("charge"), Trigger("now")))
    assert error.code == "action_type_mismatch"
    events = story.do(c.Reserve(story.turn, "standard", ActionSpec("speak"), Trigger("Ben moves")))
    reservation = of(events, ev.ActionReserved)[0].reservation
    assert (reservation.mode, reservation.action.type) == ("ready", "free")


def test_r6_dnd3e_catalogue_maps_kinds_to_types() -> None:
    story = dnd()
    assert of(act(story, "draw_weapon"), ev.ActionDeclared)[0].action.type == "move"
    assert of(act(story, "cast"), ev.ActionDeclared)[0].action.type == "standard"
    story.end_turn()
    assert of(act(story, "run"), ev.ActionDeclared)[0].action.type == "full"


def test_r6_dnd3e_unknown_kind_must_state_its_type() -> None:
    story = dnd()
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("grapple")))
    assert (error.code, error.field) == ("unknown_action_kind", "action.kind")
    assert of(act(story, "grapple", "full"), ev.ActionDeclared)[0].action.type == "full"
    assert refused(story, "move") == "action_unavailable"


def test_r6_dnd3e_stated_type_contradicting_catalogue_is_mismatch() -> None:
    story = dnd()
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("charge", "standard")))
    assert error.code == "action_type_mismatch"
    error = story.refuse(c.DeclareAction(story.turn, ActionSpec("attack", "movement")))
    assert error.code == "action_type_mismatch"


def test_r6_marvel_held_turn_later_in_the_round_brings_no_second_reaction() -> None:
    story = marvel()
    story.do(c.Hold(story.turn))
    story.do(c.TakeHeldTurn("ana", "after", "ben"))
    react(story, "ana")  # during Ben's turn Ana spends her reaction
    assert not reaction(story, "ana")
    events = story.end_turn()  # Ben ends: Ana's held turn, still her round-1 turn
    assert [e.kind for e in of(events, ev.TurnStarted)] == ["held"]
    assert of(events, ev.ReactionRefreshed) == []
    assert not reaction(story, "ana")
