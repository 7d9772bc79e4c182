"""R16 Who may do what: the narrator everything, a player only its own combatants, an observer
nothing; bridges and plugins are recorded by origin; hidden combatants and narrator-only details
never reach players or observers until revealed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from story import OBSERVER, Story, of, player
from turnkeeper_engine import (
    BUNDLED_RULES,
    NARRATOR,
    Actor,
    State,
    View,
    evolve,
    from_plain,
    to_plain,
    view,
    visible,
)
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts, TurnRef
from turnkeeper_engine.plain import event_from_plain, event_to_plain, from_shared, to_shared
from turnkeeper_sdk.views import CombatView

U1 = player("u1")
BRIDGE_U1 = Actor("player", "u1", "bridge:discord")

FACES = {"ann": (6, 6, 5), "bob": (6, 5, 5), "cat": (5, 5, 5), "ogre": (4, 4, 4)}
"""marvel, no Fantastic: ann 17, bob 16, cat 15, ogre 12."""


def added() -> Story:
    """ann and cat are u1's, bob is u2's, the ogre is the narrator's; nobody has rolled."""
    s = Story("marvel")
    s.add("ann", controller="u1", player_character=True)
    s.add("bob", controller="u2", player_character=True)
    s.add("cat", controller="u1", player_character=True)
    s.add("ogre")
    return s


def started() -> Story:
    s = added()
    for cid, faces in FACES.items():
        s.roll(cid, *faces)
    s.do(c.StartCombat())
    assert s.state.order == ("ann", "bob", "cat", "ogre")
    return s


def turn_of(s: Story, who: str) -> TurnRef:
    while s.current != who:
        s.end_turn()
    return s.turn


def window_offering(s: Story, who: str) -> str:
    s.do(c.AnnounceTrigger(TriggerFacts("explosion"), offer=(who,)))
    assert s.state.window is not None
    return s.state.window.id


# Each builder prepares the story (as the narrator) and returns the command that acts for ``x``.
Builder = Callable[[str], tuple[Story, c.Command]]


def _roll(x: str) -> tuple[Story, c.Command]:
    return added(), c.RollInitiative(x, (3, 3, 3))


def _order_ties(x: str) -> tuple[Story, c.Command]:
    return added(), c.OrderTies(("cat", x))


def _end_turn(x: str) -> tuple[Story, c.Command]:
    s = started()
    return s, c.EndTurn(turn_of(s, x))


def _declare(x: str) -> tuple[Story, c.Command]:
    s = started()
    return s, c.DeclareAction(turn_of(s, x), ActionSpec("move"))


def _hold(x: str) -> tuple[Story, c.Command]:
    s = started()
    return s, c.Hold(turn_of(s, x))


def _reserve(x: str) -> tuple[Story, c.Command]:
    s = started()
    return s, c.Reserve(turn_of(s, x), "standard", ActionSpec("attack"), Trigger("it moves"))


def _take_held(x: str) -> tuple[Story, c.Command]:
    s = started()
    s.do(c.Hold(turn_of(s, x)))
    return s, c.TakeHeldTurn(x, "after", s.current)


def _claim(x: str) -> tuple[Story, c.Command]:
    s = started()
    return s, c.ClaimReaction(window_offering(s, x), x, action=ActionSpec("attack"))


def _pass(x: str) -> tuple[Story, c.Command]:
    s = started()
    return s, c.PassReaction(window_offering(s, x), x)


def _finish(x: str) -> tuple[Story, c.Command]:
    s = started()
    window = window_offering(s, x)
    s.do(c.ClaimReaction(window, x, action=ActionSpec("attack")))
    assert s.state.window is not None
    assert s.state.window.status == "resolving"
    return s, c.FinishReaction(window, x)


PLAYER_COMMANDS: dict[str, Builder] = {
    "roll_initiative": _roll,
    "order_ties": _order_ties,
    "end_turn": _end_turn,
    "declare_action": _declare,
    "hold": _hold,
    "reserve": _reserve,
    "take_held_turn": _take_held,
    "claim_reaction": _claim,
    "pass_reaction": _pass,
    "finish_reaction": _finish,
}
SUBJECTS = {"own": "ann", "other_player": "bob", "narrator_run": "ogre"}
ACTORS = {"narrator": NARRATOR, "player": U1, "bridge": BRIDGE_U1}


@pytest.mark.parametrize("actor_name", list(ACTORS))
@pytest.mark.parametrize("subject", list(SUBJECTS))
@pytest.mark.parametrize("command_name", list(PLAYER_COMMANDS))
def test_r16_matrix_role_command_combatant(
    actor_name: str, subject: str, command_name: str
) -> None:
    s, command = PLAYER_COMMANDS[command_name](SUBJECTS[subject])
    assert command.name == command_name
    actor = ACTORS[actor_name]
    if actor_name == "narrator" or subject == "own":
        events = s.do(command, actor)
        (recorded,) = of(events, ev.CommandRecorded)
        assert (recorded.command, recorded.actor) == (command_name, actor)
    else:
        error = s.refuse(command, actor)
        assert (error.code, error.field) == ("forbidden", "combatant")


def test_r16_player_supplied_dice_record_the_player() -> None:
    s = added()
    events = s.do(c.RollInitiative("ann", (2, 3, 4)), U1)
    (rolled,) = of(events, ev.InitiativeRolled)
    assert rolled.check.supplied_by == "u1"
    assert rolled.check.faces == (2, 3, 4)


def test_r16_player_order_ties_needs_every_named_combatant_its_own() -> None:
    s = added()
    error = s.refuse(c.OrderTies(("ann", "cat", "bob")), U1)
    assert (error.code, error.field) == ("forbidden", "combatant")
    s.do(c.OrderTies(("cat", "ann")), U1)


def test_r16_player_stale_turn_of_own_combatant_is_stale_not_forbidden() -> None:
    s = started()
    old = s.turn
    s.end_turn()
    error = s.refuse(c.EndTurn(old), U1)
    assert error.code == "stale_turn"


def test_r16_player_cannot_end_anothers_turn_with_its_own_name() -> None:
    s = started()
    s.end_turn()
    assert s.current == "bob"
    # Naming its own combatant for bob's turn is not bob's turn: stale, and bob plays on.
    error = s.refuse(c.EndTurn(TurnRef(1, "ann")), U1)
    assert error.code == "stale_turn"
    assert s.current == "bob"


def narrator_only_commands(s: Story) -> list[c.Command]:
    window = "w1"
    return [
        c.AddCombatant("dan", "Dan", controller="u1", player_character=True),
        c.RemoveCombatant("ann"),
        c.DefeatCombatant("ann"),
        c.ReviveCombatant("ann"),
        c.RevealCombatant("ann"),
        c.MarkSurprised("ann"),
        c.ReorderGroup("g", ("ann", "cat")),
        c.StartCombat(),
        c.AnnounceTrigger(TriggerFacts("shout", "ann")),
        c.CloseWindow(window),
        c.ApplyCondition("ann", "custom", source="ann"),
        c.RemoveCondition("c1"),
        c.Surprise("bob", ("ann",)),
        c.RecordOutcome("note", "Ann is noted", "ann"),
        c.DisablePlugin("surprise"),
        c.EnablePlugin("surprise"),
        c.SetTurnTimer(30),
        c.Tick(),
        c.Undo(),
        c.EndCombat(),
    ]


@pytest.mark.parametrize("phase", ["setup", "rounds"])
@pytest.mark.parametrize("actor", [U1, BRIDGE_U1], ids=["player", "bridge"])
def test_r16_narrator_only_commands_refused_to_players(phase: str, actor: Actor) -> None:
    s = added() if phase == "setup" else started()
    for command in narrator_only_commands(s):
        error = s.refuse(command, actor)
        assert (error.code, error.field) == ("forbidden", "actor"), command.name


def every_command(s: Story) -> list[c.Command]:
    turn = s.turn
    return [
        c.CreateCombat("other", "marvel"),
        *narrator_only_commands(s),
        c.RollInitiative("ann"),
        c.OrderTies(("ann", "cat")),
        c.EndTurn(turn),
        c.DeclareAction(turn, ActionSpec("move")),
        c.Hold(turn),
        c.TakeHeldTurn("ann", "after", "bob"),
        c.Reserve(turn, "standard", ActionSpec("attack"), Trigger("it moves")),
        c.Refocus(turn),
        c.ClaimReaction("w1", "ann", action=ActionSpec("attack")),
        c.PassReaction("w1", "ann"),
        c.FinishReaction("w1", "ann"),
    ]


def test_r16_every_command_is_covered() -> None:
    assert {type(x) for x in every_command(started())} == set(c.COMMANDS.values())


@pytest.mark.parametrize("actor", [OBSERVER, Actor("observer", "u1", "bridge:discord")])
def test_r16_observer_is_read_only(actor: Actor) -> None:
    s = started()
    for command in every_command(s):
        error = s.refuse(command, actor)
        assert (error.code, error.field) == ("forbidden", "actor"), command.name


def test_r16_observer_cannot_create_a_combat() -> None:
    s = Story("marvel")
    from turnkeeper_engine import BUNDLED_RULES, Engine

    engine = Engine(s.dice, rules=BUNDLED_RULES)
    error = engine.handle(c.CreateCombat("x", "marvel"), 0.0, OBSERVER)
    assert not isinstance(error, list)
    assert (error.code, error.field) == ("forbidden", "actor")
    assert engine.state == State()


def test_r16_bridge_acts_for_its_user_and_is_recorded() -> None:
    s = started()
    events = s.do(c.DeclareAction(s.turn, ActionSpec("move")), BRIDGE_U1)
    (recorded,) = of(events, ev.CommandRecorded)
    assert recorded.actor == Actor("player", "u1", "bridge:discord")
    assert recorded.actor.via == "bridge:discord"
    s.do(c.EndTurn(s.turn), BRIDGE_U1)
    assert s.current == "bob"
    error = s.refuse(c.EndTurn(s.turn), BRIDGE_U1)
    assert (error.code, error.field) == ("forbidden", "combatant")


def test_r16_bridge_supplied_dice_record_the_user() -> None:
    s = added()
    events = s.do(c.RollInitiative("cat", (1, 2, 3)), BRIDGE_U1)
    (rolled,) = of(events, ev.InitiativeRolled)
    assert rolled.check.supplied_by == "u1"


def test_r16_plugin_is_recorded_with_its_name_and_validated() -> None:
    s = added()
    plugin = Actor("narrator", via="plugin:surprise")
    events = s.do(c.MarkSurprised("ogre"), plugin)
    (recorded,) = of(events, ev.CommandRecorded)
    assert recorded.actor == plugin
    assert recorded.actor.via == "plugin:surprise"
    s.roll("ann", 2, 2, 2)
    # A plugin's proposal passes the same validation as anyone's.
    assert s.refuse(c.MarkSurprised("ann"), plugin).code == "already_rolled"
    assert s.refuse(c.MarkSurprised("ogre"), plugin).code == "invalid_value"


def test_r16_player_plugin_is_bound_like_a_player() -> None:
    s = started()
    plugin = Actor("player", "u2", "plugin:autopilot")
    error = s.refuse(c.EndTurn(s.turn), plugin)
    assert (error.code, error.field) == ("forbidden", "combatant")
    s.end_turn()
    events = s.do(c.EndTurn(s.turn), plugin)
    assert of(events, ev.CommandRecorded)[0].actor == plugin


def test_r16_player_without_user_owns_nothing() -> None:
    s = added()
    s.add("npc")
    for actor in (Actor("player"), Actor("player", None, "bridge:discord")):
        for cid in ("ann", "npc"):
            error = s.refuse(c.RollInitiative(cid), actor)
            assert (error.code, error.field) == ("forbidden", "combatant")


# --------------------------------------------------------------------------- hidden combatants

READERS = [U1, player("u2"), OBSERVER]
READER_IDS = ["player_u1", "player_u2", "observer"]


def hidden_table() -> Story:
    """ann (u1) 17, bob (u2) 16, ogre 12 and a hidden lurker 14: order ann, bob, lurker, ogre."""
    s = Story("marvel")
    s.add("ann", controller="u1", player_character=True)
    s.roll("ann", 6, 6, 5)
    s.add("bob", controller="u2", player_character=True)
    s.roll("bob", 6, 5, 5)
    s.add("lurker", hidden=True)
    s.roll("lurker", 5, 5, 4)
    s.add("ogre")
    s.roll("ogre", 4, 4, 4)
    s.do(c.StartCombat())
    assert s.state.order == ("ann", "bob", "lurker", "ogre")
    return s


def seen_events(s: Story, actor: Actor) -> list[ev.Event]:
    """The log as ``actor`` sees it, each event judged against the state right after it."""
    state = State()
    seen = []
    for event in s.log:
        state = evolve(state, event)
        shown = visible(event, state, actor)
        if shown is not None:
            seen.append(shown)
    return seen


def mentions(thing: object, combatant_id: str) -> bool:
    return combatant_id in repr(thing).lower()


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_view_excludes_hidden_combatant(actor: Actor) -> None:
    s = hidden_table()
    seen = view(s.state, actor)
    assert [x.id for x in seen.combatants] == ["ann", "bob", "ogre"]
    assert seen.order == ("ann", "bob", "ogre")
    assert not mentions(seen, "lurker")
    full = view(s.state, NARRATOR)
    assert full.order == ("ann", "bob", "lurker", "ogre")
    assert "lurker" in [x.id for x in full.combatants]


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_view_hides_hidden_turn_hold_and_conditions(actor: Actor) -> None:
    s = hidden_table()
    turn_of(s, "lurker")
    assert view(s.state, actor).turn is None
    assert view(s.state, NARRATOR).turn == s.state.turn
    s.do(c.ApplyCondition("lurker", "custom", source="lurker"))
    s.do(c.Hold(s.turn))
    assert s.state.hold_of("lurker") is not None
    assert s.current == "ogre"
    seen = view(s.state, actor)
    assert seen.holds == ()
    assert seen.conditions == ()
    assert not mentions(seen, "lurker")
    full = view(s.state, NARRATOR)
    assert len(full.holds) == 1
    assert len(full.conditions) == 1
    for event in seen_events(s, actor):
        assert not mentions(event, "lurker"), event


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_hidden_surpriser_not_shown_in_condition(actor: Actor) -> None:
    s = hidden_table()
    turn_of(s, "lurker")
    s.do(c.Surprise("bob", ("lurker",)))
    seen = view(s.state, actor)
    assert [k.target for k in seen.conditions] == ["bob"]
    assert seen.conditions[0].surprisers == ()
    # Neither the surpriser list nor the condition's source or clock may name the lurker.
    assert not mentions(seen, "lurker")
    for event in seen_events(s, actor):
        assert not mentions(event, "lurker"), event


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_view_hides_window_of_hidden_actor(actor: Actor) -> None:
    s = hidden_table()
    s.do(c.AnnounceTrigger(TriggerFacts("ambush", "lurker"), offer=("ann",)))
    assert s.state.window is not None
    assert view(s.state, actor).window is None
    assert view(s.state, NARRATOR).window == s.state.window


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_view_strips_hidden_from_window(actor: Actor) -> None:
    s = hidden_table()
    s.do(c.AnnounceTrigger(TriggerFacts("explosion"), offer=("lurker", "ann", "ogre")))
    w = s.state.window
    assert w is not None
    # The ogre is narrator-run: that a reservation of its matched is the narrator's secret.
    assert view(s.state, actor).window.offered == ("ann",)  # type: ignore[union-attr]
    s.do(c.ClaimReaction(w.id, "lurker", action=ActionSpec("attack")))
    passed = s.do(c.PassReaction(w.id, "ogre"))
    seen = view(s.state, actor).window
    assert seen is not None
    assert seen.claims == ()
    # The ogre's pass would tell that it was offered the window: the narrator's secret.
    assert seen.passes == ()
    assert [visible(e, s.state, actor) for e in of(passed, ev.ReactionPassed)] == [None]
    assert not mentions(seen, "lurker")
    s.dice.push(6, 6, 6, 2, 2, 2)  # fresh checks for lurker and ann (R12)
    s.do(c.ClaimReaction(w.id, "ann", action=ActionSpec("attack")), U1)
    resolving = s.state.window
    assert resolving is not None
    assert resolving.sequence == ("lurker", "ann")
    seen = view(s.state, actor).window
    assert seen is not None
    assert seen.sequence == ("ann",)
    assert not mentions(seen, "lurker")
    # The lurker reacts first: nobody the reader can see is reacting, not ann.
    assert (resolving.index, seen.index) == (0, -1)
    s.do(c.FinishReaction(w.id, "lurker"))
    after = s.state.window
    assert after is not None
    assert after.index == 1
    seen = view(s.state, actor).window
    assert seen is not None
    assert seen.index == 0
    assert seen.sequence[seen.index] == "ann"


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_a_narrator_run_claim_is_secret_until_its_reaction_resolves(actor: Actor) -> None:
    s = hidden_table()
    s.do(c.AnnounceTrigger(TriggerFacts("explosion"), offer=("ann", "ogre")))
    w = s.state.window
    assert w is not None
    claimed = s.do(c.ClaimReaction(w.id, "ogre", action=ActionSpec("attack")))
    assert [visible(e, s.state, actor) for e in of(claimed, ev.ReactionClaimed)] == [None]
    seen = view(s.state, actor).window
    assert seen is not None
    assert seen.claims == ()
    s.do(c.PassReaction(w.id, "ann"), U1)
    # The window closes: the ogre's reaction resolves in the open.
    resolving = view(s.state, actor).window
    assert resolving is not None
    assert resolving.sequence == ("ogre",)


def test_r16_hidden_actor_never_fires_a_players_reservation() -> None:
    """The player could not see the window (its actor is hidden), so it is never offered one;
    a visible actor's same move fires the same reservation."""
    s = hidden_table()
    attack = ActionSpec("attack", targets=("ann",))
    trigger = Trigger("when anyone attacks", Predicate(kinds=("attack",)))
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), trigger), U1)
    s.end_turn()
    s.end_turn()
    assert s.current == "lurker"
    events = s.do(c.DeclareAction(s.turn, attack))
    assert of(events, ev.WindowOpened) == []
    s.end_turn()
    assert s.current == "ogre"
    s.do(c.DeclareAction(s.turn, attack))
    (opened,) = of(s.log, ev.WindowOpened)
    assert opened.window.offered == ("ann",)


def test_r16_events_about_hidden_combatants_are_dropped_or_stripped() -> None:
    s = hidden_table()
    # A late arrival slots in; the lurker holds, and a window offers it among others.
    s.add("late", controller="u2", player_character=True, faces=(2, 2, 2))
    turn_of(s, "lurker")
    s.do(c.Hold(s.turn))
    s.do(c.AnnounceTrigger(TriggerFacts("explosion"), offer=("lurker", "ann")))
    w = s.state.window
    assert w is not None
    s.do(c.ClaimReaction(w.id, "lurker", action=ActionSpec("attack")))
    s.dice.push(6, 6, 6, 2, 2, 2)
    s.do(c.ClaimReaction(w.id, "ann", action=ActionSpec("attack")))
    for actor in READERS:
        seen = seen_events(s, actor)
        for event in seen:
            assert not mentions(event, "lurker"), event
        (start,) = of(seen, ev.CombatStarted)
        assert start.order == ("ann", "bob", "ogre")
        (slotted,) = of(seen, ev.CombatantSlotted)
        assert slotted.order == ("ann", "bob", "ogre", "late")
        opened = of(seen, ev.WindowOpened)[-1]
        assert opened.window.offered == ("ann",)
        (sequence,) = of(seen, ev.SequenceOrdered)
        assert sequence.sequence == ("ann",)
        assert [i for i, _ in sequence.checks] == ["ann"]
        assert not of(seen, ev.TurnHeld)
        assert [e.combatant for e in of(seen, ev.TurnStarted)] == ["ann", "bob", "ogre"]
    # The narrator sees it all.
    narrated = seen_events(s, NARRATOR)
    assert narrated == s.log


def test_r16_an_outcome_loses_the_pairs_that_name_a_hidden_combatant_and_still_decodes() -> None:
    s = hidden_table()
    s.do(
        c.RecordOutcome(
            "counterspell",
            "Ann counters the spell.",
            "ann",
            (("readier", "ann"), ("against", "lurker"), ("dc", 15)),
        )
    )
    for actor in READERS:
        (outcome,) = of(seen_events(s, actor), ev.OutcomeRecorded)
        assert outcome.values == (("readier", "ann"), ("dc", 15))
        assert event_from_plain(event_to_plain(outcome)) == outcome


def test_r16_hidden_place_change_order_is_stripped() -> None:
    s = hidden_table()
    s.do(c.Hold(s.turn))  # ann holds
    s.do(c.TakeHeldTurn("ann", "after", "bob"))
    s.end_turn()  # bob: ann's held turn follows
    assert s.current == "ann"
    assert s.state.order == ("bob", "ann", "lurker", "ogre")
    for actor in READERS:
        seen = seen_events(s, actor)
        (moved,) = of(seen, ev.PlaceChanged)
        assert moved.order == ("bob", "ann", "ogre")
        for event in seen:
            assert not mentions(event, "lurker"), event


def test_r16_hold_planned_after_hidden_is_not_shown() -> None:
    s = hidden_table()
    s.do(c.Hold(s.turn))  # ann holds; the narrator plans it after the lurker
    s.do(c.TakeHeldTurn("ann", "after", "lurker"))
    for actor in READERS:
        seen_state = view(s.state, actor)
        assert [h.combatant for h in seen_state.holds] == ["ann"]
        assert not mentions(seen_state, "lurker")
        # Nor a plan to wait on no one, which would tell that someone hidden is there.
        assert [(h.plan, h.target) for h in seen_state.holds] == [(None, None)]
        for event in seen_events(s, actor):
            assert not mentions(event, "lurker"), event
            assert not isinstance(event, ev.HoldPlanned), event


def test_r16_hidden_combatant_absent_from_rolloffs() -> None:
    s = Story("marvel")
    s.add("ann", controller="u1", player_character=True)
    s.roll("ann", 6, 6, 5)
    s.add("ogre")
    s.roll("ogre", 4, 4, 4)
    s.add("lurker", hidden=True)
    s.roll("lurker", 4, 4, 4)  # an exact tie with the ogre: a roll-off
    s.dice.push(5, 2)
    s.do(c.StartCombat())
    assert s.state.order == ("ann", "ogre", "lurker")
    for actor in READERS:
        for event in seen_events(s, actor):
            assert not mentions(event, "lurker"), event


def test_r16_reveal_makes_hidden_combatant_visible() -> None:
    s = hidden_table()
    s.end_turn()
    s.end_turn()
    assert s.current == "lurker"
    assert view(s.state, U1).turn is None
    mark = len(s.log)
    events = s.do(c.RevealCombatant("lurker"))
    assert [e.name for e in events] == ["command_recorded", "combatant_revealed"]
    seen = view(s.state, U1)
    assert [x.id for x in seen.combatants] == ["ann", "bob", "lurker", "ogre"]
    assert seen.order == ("ann", "bob", "lurker", "ogre")
    assert seen.turn == s.state.turn
    s.end_turn()
    s.end_turn()  # round 2: ann
    s.end_turn()
    s.end_turn()  # lurker's turn, now visible
    after = seen_events(s, U1)
    revealed = of(after, ev.CombatantRevealed)
    assert [e.combatant.id for e in revealed] == ["lurker"]
    tail = [e for e in s.log[mark:] if visible(e, s.state, U1) is not None]
    assert any(isinstance(e, ev.TurnStarted) and e.combatant == "lurker" for e in tail)
    assert any(isinstance(e, ev.TurnStarted) and e.combatant == "lurker" for e in after)
    # Events from before the reveal stay as they were shown then.
    started_early = [
        e
        for e in seen_events(s, U1)[: len(seen_events(s, U1)) - len(tail)]
        if isinstance(e, ev.TurnStarted)
    ]
    assert "lurker" not in [e.combatant for e in started_early]


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_narrator_run_reservations_are_secret(actor: Actor) -> None:
    s = hidden_table()
    trigger = Trigger("ann moves", None)
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack", targets=("ogre",)), trigger), U1)
    turn_of(s, "ogre")
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack", targets=("ann",)), trigger))
    assert [r.combatant for r in s.state.reservations] == ["ann", "ogre"]
    assert [r.combatant for r in view(s.state, actor).reservations] == ["ann"]
    assert [r.combatant for r in view(s.state, NARRATOR).reservations] == ["ann", "ogre"]
    reserved = of(seen_events(s, actor), ev.ActionReserved)
    assert [e.reservation.combatant for e in reserved] == ["ann"]
    s.end_turn()  # round 2: ann's turn starts; her reservation expires
    s.end_turn()
    s.end_turn()
    s.end_turn()  # ogre's turn: its reservation expires, unseen by players
    expired = of(seen_events(s, actor), ev.ReservationExpired)
    assert [e.combatant for e in expired] == ["ann"]
    assert [e.combatant for e in of(s.log, ev.ReservationExpired)] == ["ann", "ogre"]


def test_r16_surprise_edges_on_a_hidden_target_are_scrubbed() -> None:
    s = hidden_table()
    s.do(c.Surprise("lurker", (s.current,)))
    events = s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("lurker",))))
    (declared,) = of(events, ev.ActionDeclared)
    assert declared.edges == ("surprised:lurker",)
    seen = visible(declared, s.state, U1)
    assert isinstance(seen, ev.ActionDeclared)
    assert (seen.action.targets, seen.edges) == ((), ())


def test_r16_a_hidden_combatant_does_not_exist_for_players() -> None:
    s = hidden_table()
    s.do(c.DefeatCombatant("lurker"))  # a defeated one would say so to whoever may see it
    assert s.current == "ann"
    for target in ("lurker", "nobody"):
        attack = c.DeclareAction(s.turn, ActionSpec("attack", targets=(target,)))
        error = s.refuse(attack, U1)
        assert (error.code, error.field) == ("unknown_combatant", "action.targets")
        assert "Lurker" not in error.message
    s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("lurker",))))  # the narrator


def test_r16_a_player_sees_its_own_hidden_combatant() -> None:
    s = hidden_table()
    s.add("shade", controller="u1", player_character=True, hidden=True, faces=(1, 1, 2))
    assert "shade" in [c.id for c in view(s.state, U1).combatants]
    assert "shade" not in [c.id for c in view(s.state, player("u2")).combatants]
    added = [e for e in s.log if isinstance(e, ev.CombatantSlotted) and e.combatant == "shade"]
    assert visible(added[0], s.state, U1) is not None
    assert visible(added[0], s.state, player("u2")) is None


def judged_later(s: Story, actor: Actor) -> list[ev.Event]:
    """The whole log as ``actor`` sees it when reading it now (history, catch-up): each event
    judged by its seq against the latest state."""
    shown = (visible(e, s.state, actor, seq) for seq, e in enumerate(s.log, start=1))
    return [e for e in shown if e is not None]


@pytest.mark.parametrize(
    "change",
    [c.Undo(), c.RemoveCombatant("ogre"), c.DefeatCombatant("ogre")],
    ids=["undone", "removed", "defeated"],
)
@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_hidden_stays_hidden_in_history_once_undone_removed_or_defeated(
    change: c.Command, actor: Actor
) -> None:
    s = Story("marvel")
    s.add("ann", controller="u1", player_character=True)
    s.add("ogre", "Secret Ogre", hidden=True, tags=("boss",))
    s.roll("ogre", 6, 6, 5)
    if isinstance(change, c.Undo):
        s.do(c.Undo())  # the roll
        s.do(c.Undo())  # the addition: the ogre is gone from the state
        assert s.state.get("ogre") is None
    else:
        s.do(change)
    later = judged_later(s, actor)
    assert later == seen_events(s, actor)
    assert not any(mentions(e, "ogre") for e in later), later


def test_r16_undo_of_a_reveal_hides_again_from_then_on() -> None:
    s = hidden_table()
    s.do(c.RevealCombatant("lurker"))
    mark = len(s.log)
    s.do(c.DefeatCombatant("lurker"))  # while revealed: seen
    s.do(c.Undo())  # the defeat
    s.do(c.Undo())  # the reveal: hidden again
    s.do(c.DefeatCombatant("lurker"))  # while hidden again: not seen
    later = judged_later(s, U1)
    assert later == seen_events(s, U1)
    marked = of(later, ev.CombatantDefeated)
    assert len(marked) == 1
    assert s.log.index(marked[0]) < len(s.log) - 2
    assert any(isinstance(e, ev.CombatantRevealed) for e in s.log[:mark])


def test_r16_events_before_a_reveal_stay_hidden_after_it() -> None:
    """R16: visibility is decided by what was hidden when the event happened. A reveal
    tells the whole combatant (``combatant_revealed``) and every event from then on; its
    addition, its roll and its turns before the reveal stay the narrator's."""
    s = hidden_table()
    s.end_turn()
    s.end_turn()  # the lurker's turn, unseen
    s.do(c.RevealCombatant("lurker"))
    later = judged_later(s, U1)
    assert later == seen_events(s, U1)
    about = [e for e in later if "lurker" in e.subjects()]
    assert [e.name for e in about] == ["combatant_revealed"]
    assert view(s.state, U1).turn == s.state.turn


def test_r16_a_visible_combatant_reusing_an_undone_hidden_id_is_seen_from_its_addition() -> None:
    s = Story("marvel")
    s.add("ann", controller="u1", player_character=True)
    s.add("x", "Hidden X", hidden=True)
    s.do(c.Undo())
    s.add("x", "Plain X")
    later = judged_later(s, OBSERVER)
    assert later == seen_events(s, OBSERVER)
    names_seen = [e.combatant.name for e in of(later, ev.CombatantAdded)]
    assert names_seen == ["Ann", "Plain X"]


def test_r16_a_players_own_hidden_combatant_stays_its_own_once_undone() -> None:
    s = Story("marvel")
    s.add("shade", controller="u1", player_character=True, hidden=True)
    s.do(c.Undo())
    assert [e.combatant.id for e in of(judged_later(s, U1), ev.CombatantAdded)] == ["shade"]
    assert of(judged_later(s, player("u2")), ev.CombatantAdded) == []


def test_r16_the_record_of_secrets_survives_a_snapshot() -> None:
    s = Story("marvel")
    s.add("x", hidden=True)
    s.do(c.Undo())
    back = from_shared(State, to_shared(s.state))
    assert (back.seq, back.secrets) == (s.state.seq, s.state.secrets) == (6, s.state.secrets)
    assert [(k.combatant, k.since, k.until) for k in back.secrets] == [("x", 4, 6)]


@pytest.mark.parametrize("actor", READERS, ids=READER_IDS)
def test_r16_view_tells_rules_and_turns_come_without_hidden_ones(actor: Actor) -> None:
    """The view's rule options are every reader's, whole, even where a hidden combatant's id is
    one of their words ("hold"); the turns come this round leave the hidden ones out."""
    s = Story("marvel", turn_expiry="hold")
    s.add("ann", controller="u1", player_character=True)
    s.roll("ann", 6, 6, 5)
    s.add("hold", hidden=True)
    s.roll("hold", 5, 5, 4)
    s.add("ogre")
    s.roll("ogre", 4, 4, 4)
    s.do(c.StartCombat())
    turn_of(s, "ogre")
    full = view(s.state, NARRATOR)
    seen = view(s.state, actor)
    assert dict(seen.options)["turn_expiry"] == "hold"
    assert seen.options == full.options == s.state.options
    assert full.reached == ("ann", "hold", "ogre")
    assert seen.reached == ("ann", "ogre")
    assert seen.bonus == full.bonus == ()
    # Over the wire, as a bot's view: the SDK answers its option() from it.
    bots = CombatView(from_plain(View, to_plain(seen)), 0, BUNDLED_RULES)
    assert bots.option("turn_expiry") == "hold"
    with pytest.raises(KeyError):
        bots.option("ready")
