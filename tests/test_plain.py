"""The plain-data seam every transport and store uses: exact round trips, clear refusals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from story import Story
from turnkeeper_engine import BUNDLED_RULES, RuleError, SeededDice, State, decide, fold
from turnkeeper_engine import commands as c
from turnkeeper_engine.model import (
    ActionSpec,
    Clock,
    Event,
    History,
    Predicate,
    Trigger,
    TriggerFacts,
)
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
    assert s.state.undo.reach == 9  # every command but the creation


DICE = SeededDice(0)
"""The commands below carry their faces: no die is rolled."""


def _undone(state: State) -> State:
    events = decide(state, c.Undo(), 0.0, dice=DICE, rules=BUNDLED_RULES)
    assert not isinstance(events, RuleError), events
    return fold(events, state)


def _game(state: State) -> State:
    """``state`` without its undo history, which an older daemon's snapshot keeps otherwise."""
    return dataclasses.replace(state, undo=History())


def test_a_snapshot_an_older_daemon_encoded_loads_with_its_undo_reach() -> None:
    """A snapshot with the prior states older daemons kept for undo (encoded by one, the
    commands that made it beside it) loads as the state a replay gives, and undoes like it."""
    old = json.loads((Path(__file__).parent / "data" / "old_undo_snapshot.json").read_text())
    replayed, now = State(), 1000.0
    for plain in old["commands"]:
        events = decide(replayed, command_from_plain(plain), now, dice=DICE, rules=BUNDLED_RULES)
        assert not isinstance(events, RuleError), events
        replayed, now = fold(events, replayed), now + 1
    loaded = from_shared(State, old["snapshot"])
    assert (loaded.seq, loaded.secrets) == (replayed.seq, replayed.secrets)
    assert loaded.seq == old["seq"]
    assert _game(loaded) == _game(replayed)
    assert loaded.undo.reach == replayed.undo.reach == 10
    # A command after the load is undone too, then every command the old daemon could undo.
    both = [loaded, replayed]
    turn = replayed.turn
    assert turn is not None
    for command in [c.EndTurn(turn.ref), *[c.Undo()] * 11]:
        after = []
        for state in both:
            events = decide(state, command, now, dice=DICE, rules=BUNDLED_RULES)
            assert not isinstance(events, RuleError), events
            after.append(fold(events, state))
        both = after
        assert _game(both[0]) == _game(both[1])
        assert both[0].undo.reach == both[1].undo.reach
    refused = decide(both[0], c.Undo(), now, dice=DICE, rules=BUNDLED_RULES)
    assert isinstance(refused, RuleError)
    assert refused.code == "nothing_to_undo"


def test_a_state_an_older_daemon_encoded_plainly_loads_too() -> None:
    s, _ = _played()
    s.do(c.CloseWindow(s.state.window.id))  # type: ignore[union-attr]
    priors = [s.state]
    s.end_turn()
    priors.append(s.state)
    s.end_turn()
    old = to_plain(dataclasses.replace(s.state, undo=History()))
    assert isinstance(old, dict)
    old["undo"] = [{**to_plain(_game(p)), "undo": []} for p in priors]  # type: ignore[dict-item]
    loaded = from_plain(State, old)
    assert _game(loaded) == _game(s.state)
    assert loaded.undo.reach == 2
    for prior in reversed(priors):
        loaded = _undone(loaded)
        assert _game(loaded) == _game(prior)


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
    # Unchanged parts stay one object: the undo history's checkpoints share the state's.
    checkpoint = back.undo.stretches[-1].start
    assert any(a is b for a, b in zip(checkpoint.combatants, back.combatants, strict=True))
    plain_size = len(repr(to_plain(s.state)))
    assert len(repr(data)) < plain_size


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


def _walked(value: object) -> object:
    """The plain form as the definition says it: a record's fields in declaration order (an
    event's name first), tuples as arrays, frozensets sorted, scalars as they are."""
    if isinstance(value, tuple):
        return [_walked(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(_walked(v) for v in value)  # type: ignore[type-var]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        head = {"event": value.name} if isinstance(value, Event) else {}
        names = [f.name for f in dataclasses.fields(value) if f.name != "measured"]
        return {**head, **{n: _walked(getattr(value, n)) for n in names}}
    return value


def test_the_plain_form_of_every_value_is_its_fields_in_order_with_an_events_name_first() -> None:
    s = Story("marvel")
    s.add("a", hidden=True)
    s.add("b", tags=("x",))
    s.roll("a", 6, 6, 6)
    s.roll("b", 2, 2, 2)
    s.do(c.StartCombat())
    s.do(c.ApplyCondition("a", "custom", note="n"))
    s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("b",))))
    for value in (*s.log, s.state):
        plain = to_plain(value)
        assert plain == _walked(value)
        assert json.dumps(plain) == json.dumps(_walked(value))  # the keys' order too


def test_the_fast_decoders_make_the_values_and_raise_the_errors_of_the_general_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each record class's generated decoder only ever takes data the general walk would
    decode the same way; everything else goes to that walk (its errors, its values)."""
    from turnkeeper_engine import plain

    s, commands = _played()
    good: list[dict[str, object]] = [command_to_plain(command) for command in commands]
    good += [event_to_plain(event) for event in s.log]
    bad: list[dict[str, object]] = [
        {"command": "apply_condition", "target": 1, "type": "x"},
        {"command": "apply_condition", "type": "x"},
        {"command": "apply_condition", "target": "k", "type": "x", "rounds": True},
        {"command": "apply_condition", "target": "k", "type": "x", "rounds": 2.0},
        {"command": "apply_condition", "target": "k", "type": "x", "boundary": "never"},
        {"command": "apply_condition", "target": "k", "type": "x", "anchor": 3},
        {"command": "apply_condition", "target": "k", "type": "x", "extra": None},
        {"command": "take_held_turn", "combatant": "x", "when": "during", "other": "y"},
        {"command": "add_combatant", "id": "a", "display_name": "X", "group": ["g"]},
        {"command": "end_turn", "turn": {"round": 1, "combatant": "x", "extra": 1}},
    ]

    def decoded(data: dict[str, object]) -> object:
        try:
            if "command" in data:
                return command_from_plain(data)
            return event_from_plain(data)
        except PlainError as e:
            return ("refused", e.field, e.template, dict(e.args))

    fast = [decoded(d) for d in good + bad]
    assert all(isinstance(v, tuple) and v[0] == "refused" for v in fast[len(good) :])
    monkeypatch.setattr(plain, "_FAST", {})
    monkeypatch.setattr(plain, "_fast", lambda cls: lambda *args: plain._SLOW)
    assert [decoded(d) for d in good + bad] == fast


def test_a_record_whose_type_hints_do_not_resolve_is_encoded_as_its_fields() -> None:
    # A caller's own record (a client's ``_plain`` hands any value to ``to_plain``): its
    # encoder is written from its type hints, and without them its fields go the generic way.
    @dataclasses.dataclass(frozen=True)
    class Note:
        text: str
        clocks: tuple[NotDefinedAnywhere, ...]  # type: ignore[name-defined]  # noqa: F821

    assert to_plain(Note("n", (Clock("k", "end", 1),))) == {
        "text": "n",
        "clocks": [{"anchor": "k", "boundary": "end", "remaining": 1, "skip": False}],
    }
