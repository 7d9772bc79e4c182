"""R15 Undo: the narrator undoes the last command, repeatedly; the previous state returns exactly,
the undone command's dice are gone, and the undo itself is recorded."""

from __future__ import annotations

import base64
import zlib
from dataclasses import replace

import pytest

from story import OBSERVER, Story, names, of, player
from turnkeeper_engine import NARRATOR, UNDO_DEPTH, Actor, State, fold
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.evolve import STRETCH, evolve
from turnkeeper_engine.model import History


def table(ruleset: str = "dnd3e") -> Story:
    s = Story(ruleset)
    s.add("a", controller="u1", player_character=True)
    s.add("b", init_mod=2)
    return s


def test_r15_undo_restores_exact_state() -> None:
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    before = s.state
    s.do(c.StartCombat())
    assert s.state != before
    s.do(c.Undo())
    assert s.state == before
    assert s.state.phase == "initiative"
    assert s.state.turn is None


def test_r15_undo_is_recorded() -> None:
    s = table()
    s.roll("a", 12)
    events = s.do(c.Undo(), now=42.0)
    assert events == [
        ev.CommandRecorded("undo", NARRATOR, 42.0),
        ev.CommandUndone("roll_initiative"),
    ]
    assert names(events) == ["command_undone"]


def test_r15_undo_repeatedly_back_to_an_early_state() -> None:
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    states = [s.state]
    s.do(c.StartCombat())
    states.append(s.state)
    s.do(c.DeclareAction(s.turn, c.ActionSpec("move")))
    states.append(s.state)
    s.end_turn()
    states.append(s.state)
    s.do(c.Hold(s.turn))
    states.append(s.state)
    s.do(c.ApplyCondition("a", "custom", source="b"))
    # Undo one by one: each undo lands exactly on the state before the command it undoes.
    for expected in reversed(states):
        s.do(c.Undo())
        assert s.state == expected
    assert s.state.phase == "initiative"


def test_r15_undo_then_new_commands_then_undo_again() -> None:
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    s.do(c.StartCombat())
    before_end = s.state
    s.end_turn()
    s.do(c.Undo())
    assert s.state == before_end
    s.do(c.DeclareAction(s.turn, c.ActionSpec("attack")))
    s.do(c.Undo())
    assert s.state == before_end
    s.end_turn()
    assert s.current == "b"


def test_r15_dice_of_an_undone_command_are_gone() -> None:
    s = Story("dnd3e")
    s.add("a")
    s.dice.push(7)
    rolled = of(s.do(c.RollInitiative("a")), ev.InitiativeRolled)[0]
    assert rolled.check.faces == (7,)
    s.do(c.Undo())
    a = s.state.get("a")
    assert a is not None
    assert a.check is None
    assert a.place is None
    s.dice.push(16)
    rolled = of(s.do(c.RollInitiative("a")), ev.InitiativeRolled)[0]
    assert rolled.check.faces == (16,)
    a = s.state.get("a")
    assert a is not None
    assert a.check is not None
    assert a.check.total == 16


def test_r15_dice_of_an_undone_start_are_gone_marvel() -> None:
    s = Story("marvel")
    s.add("a")
    s.add("b")
    s.dice.push(2, 3, 4, 5, 5, 5)
    s.do(c.StartCombat())
    assert s.state.order == ("b", "a")
    s.do(c.Undo())
    assert all(m.check is None for m in s.state.combatants)
    s.dice.push(6, 6, 6, 2, 2, 2)
    s.do(c.StartCombat())
    assert s.state.order == ("a", "b")
    a = s.state.get("a")
    assert a is not None
    assert a.check is not None
    assert a.check.faces == (6, 6, 6)


def test_r15_events_with_undo_fold_to_the_state() -> None:
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    s.do(c.StartCombat())
    s.end_turn()
    s.do(c.Undo())
    s.do(c.Undo())
    s.do(c.StartCombat())
    assert fold(s.log) == s.state


def test_r15_nothing_to_undo_at_the_start() -> None:
    s = table()
    s.do(c.Undo())
    s.do(c.Undo())
    # Back at the freshly created combat: there is nothing left to undo.
    assert s.state.phase == "setup"
    error = s.refuse(c.Undo())
    assert error.code == "nothing_to_undo"


def test_r15_undo_of_end_combat_reopens() -> None:
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    s.do(c.StartCombat())
    s.do(c.Hold(s.turn))
    open_state = s.state
    events = s.do(c.EndCombat())
    assert "combat_ended" in names(events)
    assert s.state.phase == "ended"
    assert s.refuse(c.EndTurn(open_state.turn.ref)).code == "combat_ended"  # type: ignore[union-attr]
    s.do(c.Undo())
    assert s.state == open_state
    assert s.state.phase == "rounds"
    assert s.state.hold_of("a") is not None
    assert s.current == "b"
    s.end_turn()
    # The combat goes on: the delayer's floor turn comes up (R9).
    assert s.state.round == 1
    assert s.current == "a"
    assert s.state.turn is not None
    assert s.state.turn.kind == "floor"


@pytest.mark.parametrize("actor", [player("u1"), Actor("player", "u1", "bridge:discord"), OBSERVER])
def test_r15_players_and_observers_cannot_undo(actor: Actor) -> None:
    s = table()
    s.do(c.RollInitiative("a", (12,)), player("u1"))
    error = s.refuse(c.Undo(), actor)
    assert (error.code, error.field) == ("forbidden", "actor")


def test_r15_plugin_as_narrator_can_undo_and_is_recorded() -> None:
    s = table()
    s.roll("a", 12)
    plugin = Actor("narrator", via="plugin:undo-bot")
    events = s.do(c.Undo(), plugin)
    assert of(events, ev.CommandRecorded)[0].actor == plugin


def test_r15_undo_of_a_refused_command_is_not_possible() -> None:
    s = table()
    s.roll("a", 12)
    before = s.state
    s.refuse(c.RollInitiative("a"))  # already rolled: nothing recorded
    events = s.do(c.Undo())
    assert of(events, ev.CommandUndone)[0].command == "roll_initiative"
    assert s.state != before
    a = s.state.get("a")
    assert a is not None
    assert a.check is None


def _game(state: State) -> State:
    return replace(state, undo=History())


def test_r15_undo_reaches_exactly_undo_depth_commands_back() -> None:
    """Undo goes back ``UNDO_DEPTH`` commands, through the packed stretches of the history,
    each undo landing exactly on the state before the command it undoes, and no further."""
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    s.do(c.StartCombat())
    states = []
    for n in range(UNDO_DEPTH + STRETCH + 3):
        states.append(s.state)
        if n % 3 == 0:
            s.do(c.DeclareAction(s.turn, c.ActionSpec("move")))
        else:
            s.end_turn()
    assert s.state.undo.reach == UNDO_DEPTH
    assert any(stretch.packed for stretch in s.state.undo.stretches)
    for expected in reversed(states[-UNDO_DEPTH:]):
        s.do(c.Undo())
        # The game exactly; the history holds fewer commands than it held then (see below).
        assert _game(s.state) == _game(expected)
    assert s.refuse(c.Undo()).code == "nothing_to_undo"
    # Nothing left to undo, nothing held: the history's stretches went with their reach.
    assert s.state.undo == History()
    # Commands after that are undone again, and the history is the one they would make.
    s.end_turn()
    s.end_turn()
    s.do(c.Undo())
    s.do(c.Undo())
    assert _game(s.state) == _game(states[-UNDO_DEPTH])
    assert s.state.undo.reach == 0
    assert fold(s.log) == s.state


def test_r15_a_stretch_deflated_as_older_daemons_did_undoes_the_same() -> None:
    """A snapshot keeps a packed stretch as it was deflated: one an older daemon packed with
    zlib's default settings is undone into the games one packed now is, and once opened the
    histories are one."""
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    s.do(c.StartCombat())
    for _ in range(STRETCH + 2):
        s.end_turn()
    first, *rest = s.state.undo.stretches
    text = zlib.decompress(base64.b64decode(first.packed))
    older = replace(first, packed=base64.b64encode(zlib.compress(text, 6)).decode("ascii"))
    assert older.packed != first.packed
    now = s.state
    then = replace(now, undo=replace(now.undo, stretches=(older, *rest)))
    for _ in range(STRETCH + 2):
        now = evolve(now, ev.CommandUndone("end_turn"))
        then = evolve(then, ev.CommandUndone("end_turn"))
        assert _game(then) == _game(now)
    assert not now.undo.stretches[-1].packed
    assert then == now


def test_r15_undo_restores_the_history_too_across_its_stretches() -> None:
    """Short of ``UNDO_DEPTH``, an undo gives back the very state, its history included,
    also where a command began a stretch of the history (and packed the one before)."""
    s = table()
    s.roll("a", 12)
    s.roll("b", 7)
    s.do(c.StartCombat())
    states = []
    for _ in range(2 * STRETCH + 2):
        states.append(s.state)
        s.end_turn()
    for expected in reversed(states):
        s.do(c.Undo())
        assert s.state == expected
