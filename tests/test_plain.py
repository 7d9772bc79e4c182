"""The plain-data seam every transport and store uses: exact round trips, clear refusals."""

from __future__ import annotations

import pytest

from story import Story
from turnkeeper_engine import State
from turnkeeper_engine import commands as c
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts
from turnkeeper_engine.plain import (
    MAX_DEPTH,
    PlainError,
    command_from_plain,
    command_to_plain,
    event_from_plain,
    event_to_plain,
    from_plain,
    from_shared,
    to_plain,
    to_shared,
)


def _played() -> tuple[Story, list[c.Command]]:
    s = Story("marvel")
    commands: list[c.Command] = []

    def do(command: c.Command) -> None:
        commands.append(command)
        s.do(command)

    do(c.AddCombatant("cap", "Captain America", "steve", True, 3, tags=("avengers",)))
    do(c.AddCombatant("agent", "Hydra agent", init_mod=1, group="hydra", hidden=True))
    do(c.RollInitiative("cap", faces=(6, 6, 1)))
    do(c.RollInitiative("agent", faces=(2, 3, 4, 5), edges=1))
    do(c.StartCombat())
    do(c.DeclareAction(s.turn, ActionSpec("move", zone="corner")))
    trigger = Trigger("around the corner", Predicate(events=("move",), zones=("corner",)))
    do(c.Reserve(s.turn, "standard", ActionSpec("attack", description="punch"), trigger))
    do(c.EndTurn(s.turn))
    do(c.AnnounceTrigger(TriggerFacts("announced", "agent", zone="corner"), offer=("cap",)))
    return s, commands


def test_every_event_and_command_round_trips_exactly() -> None:
    s, commands = _played()
    for event in s.log:
        assert event_from_plain(event_to_plain(event)) == event
    for command in commands:
        assert command_from_plain(command_to_plain(command)) == command


def test_a_whole_state_round_trips_with_its_undo_history() -> None:
    s, _ = _played()
    assert from_plain(State, to_plain(s.state)) == s.state
    assert s.state.undo


def test_unknown_command_is_refused_naming_the_field() -> None:
    with pytest.raises(PlainError) as caught:
        command_from_plain({"command": "teleport"})
    assert caught.value.field == "command"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"command": "end_turn"}, "turn"),
        ({"command": "end_turn", "turn": {"round": "one", "combatant": "x"}}, "turn.round"),
        ({"command": "end_turn", "turn": {"round": 1, "combatant": "x", "extra": 1}}, "turn.extra"),
        ({"command": "roll_initiative", "combatant": "x", "faces": [1, "2"]}, "faces[1]"),
        ({"command": "roll_initiative", "combatant": "x", "edges": True}, "edges"),
        ({"command": "take_held_turn", "combatant": "x", "when": "during", "other": "y"}, "when"),
        ({"command": "add_combatant", "id": None, "display_name": "X"}, "id"),
    ],
)
def test_malformed_fields_are_refused_with_their_path(data: dict[str, object], field: str) -> None:
    with pytest.raises(PlainError) as caught:
        command_from_plain(data)
    assert caught.value.field == field


def test_hostile_nesting_is_refused() -> None:
    deep: dict[str, object] = {}
    for _ in range(MAX_DEPTH):
        deep = {"undo": [deep]}
    with pytest.raises(PlainError, match="nested too deeply"):
        from_plain(State, deep)


def test_unknown_event_is_refused() -> None:
    with pytest.raises(PlainError):
        event_from_plain({"event": "nothing"})


def test_shared_encoding_round_trips_a_state_and_keeps_its_parts_shared() -> None:
    s, _ = _played()
    s.do(c.CloseWindow(s.state.window.id))  # type: ignore[union-attr]
    for _ in range(30):
        s.end_turn()
    data = to_shared(s.state)
    back = from_shared(State, data)
    assert back == s.state
    assert back.undo[-1].combatants[0] is back.combatants[0]  # unchanged parts stay one object
    plain_size = len(repr(to_plain(s.state)))
    assert len(repr(data)) < plain_size / 2


def test_a_shared_node_reference_that_points_nowhere_is_refused() -> None:
    with pytest.raises(PlainError) as caught:
        from_shared(State, {"nodes": [], "root": {"@": 3}})
    assert caught.value.field == "root"


def test_no_event_field_collides_with_the_wire_envelope() -> None:
    """Event notifications carry ``combat``, ``seq`` and ``event`` beside the event's fields."""
    import dataclasses

    from turnkeeper_engine.events import EVENTS

    for name, cls in EVENTS.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        assert not fields & {"combat", "seq", "event"}, name


def test_a_client_reads_what_a_newer_daemon_sends_and_skips_fields_it_does_not_know() -> None:
    """The API contract lets a daemon add fields: a client decodes a view with extra fields,
    nested ones included, while a request with an unknown field is still refused."""
    from turnkeeper_engine import NARRATOR, View, view

    s, _ = _played()
    sent = to_plain(view(s.state, NARRATOR))
    assert isinstance(sent, dict)
    newer = {**sent, "weather": "rain"}
    newer["combatants"] = [{**c, "mood": "calm"} for c in sent["combatants"]]  # type: ignore[union-attr, dict-item]
    assert from_plain(View, newer, strict=False) == view(s.state, NARRATOR)
    with pytest.raises(PlainError) as refused:
        from_plain(View, newer)
    assert refused.value.field == "weather"
    # A request is decoded strictly: an unknown field is refused.
    with pytest.raises(PlainError):
        command_from_plain({"command": "end_combat", "extra": 1})
