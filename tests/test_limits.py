"""Bad input is refused with a stable code and the offending field, and changes nothing."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from story import Story
from turnkeeper_engine import (
    BUNDLED_RULES,
    NARRATOR,
    RuleError,
    SeededDice,
    State,
    decide,
    view,
)
from turnkeeper_engine import commands as c
from turnkeeper_engine.decide import (
    MAX_COMBATANTS,
    MAX_DISABLED_PLUGINS,
    MAX_ITEMS,
    MAX_NAME,
    MAX_NUMBER,
    MAX_SECRETS,
    MAX_TEXT,
    MAX_VIEW_BYTES,
    PLAY_BYTES,
    PLAY_FIXED,
    PLAY_IDS,
    PLAY_PLUGINS,
)
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger
from turnkeeper_engine.plain import Plain, encoded_size, to_plain
from turnkeeper_sdk import wire


def _started() -> Story:
    s = Story("marvel")
    s.add("a")
    s.add("b")
    s.roll("a", 6, 6, 6)
    s.roll("b", 2, 2, 2)
    s.do(c.StartCombat())
    return s


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (c.AddCombatant("x" * (MAX_NAME + 1), "X"), "id"),
        (c.AddCombatant("x", "X", init_mod=MAX_NUMBER + 1), "init_mod"),
        (c.AddCombatant("x", "X", dexterity=-MAX_NUMBER - 1), "dexterity"),
        (c.AddCombatant("x", "X", tags=tuple(f"t{i}" for i in range(MAX_ITEMS + 1))), "tags"),
        (c.AddCombatant("x", "X", group="g" * (MAX_NAME + 1)), "group"),
    ],
)
def test_oversized_combatant_fields_are_refused(command: c.Command, field: str) -> None:
    refused = Story("marvel").refuse(command)
    assert (refused.code, refused.field) == ("invalid_value", field)


def test_oversized_action_lists_are_refused() -> None:
    s = _started()
    many = tuple(f"t{i}" for i in range(MAX_ITEMS + 1))
    refused = s.refuse(c.DeclareAction(s.turn, ActionSpec("attack", tags=many)))
    assert (refused.code, refused.field) == ("invalid_value", "action.tags")
    trigger = Trigger("whenever", Predicate(kinds=many))
    refused = s.refuse(c.Reserve(s.turn, "standard", ActionSpec("attack"), trigger))
    assert refused.field == "trigger.predicate.kinds"


def test_a_hold_number_out_of_range_is_refused() -> None:
    s = _started()
    refused = s.refuse(c.Hold(s.turn, -MAX_NUMBER - 1))
    assert (refused.code, refused.field) == ("invalid_value", "number")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 10**9])
def test_time_options_must_be_finite_and_in_range(value: float) -> None:
    from turnkeeper_engine import State, decide

    refused = decide(
        State(),
        c.CreateCombat("x", "marvel", (("turn_time_limit", value),)),
        0.0,
        dice=SeededDice(0),
        rules=BUNDLED_RULES,
    )
    assert not isinstance(refused, list)
    assert (refused.code, refused.field) == ("invalid_option", "options.turn_time_limit")


def test_a_combat_holds_at_most_max_combatants() -> None:
    s = Story("dnd3e")
    for i in range(MAX_COMBATANTS):
        s.add(f"c{i}")
    refused = s.refuse(c.AddCombatant("one-too-many", "One too many"))
    assert (refused.code, refused.field) == ("too_many_combatants", "id")


# ------------------------------------------------------------------- a combat's size, in all

BIG = "\U0001f600" * MAX_NAME
"""The longest name, in four-byte characters: the most bytes one name field can take."""


def maximal_combatant(n: int) -> c.AddCombatant:
    """A combatant whose every text field is as long as allowed, in four-byte characters."""
    tag = BIG[: MAX_NAME - 3]
    return c.AddCombatant(
        f"{n:03d}{BIG[: MAX_NAME - 3]}",
        BIG,
        controller=BIG,
        init_mod=n,  # no ties: no roll-offs
        tags=tuple(f"{i:02d}:{tag}" for i in range(MAX_ITEMS)),
    )


def view_bytes(s: Story) -> int:
    return len(msgpack.packb(to_plain(view(s.state, NARRATOR)), use_bin_type=True))


def filled() -> Story:
    """A combat with maximal combatants until the next is refused for its size."""
    s = Story("marvel")
    n = 0
    while True:
        result = s.engine.handle(maximal_combatant(n), s.now, NARRATOR)
        if isinstance(result, RuleError):
            assert (result.code, result.field) == ("combat_too_large", "")
            assert str(MAX_VIEW_BYTES) in result.message
            return s
        n += 1


def test_a_combat_grows_by_content_only_with_room_left_for_play_and_a_refusal_changes_nothing() -> (
    None
):
    s = filled()
    assert len(s.state.combatants) < MAX_COMBATANTS  # the size bound binds first
    assert view_bytes(s) < MAX_VIEW_BYTES - len(s.state.combatants) * PLAY_IDS * len(BIG) * 4
    webbed = c.ApplyCondition(s.state.combatants[0].id, "custom", note="x" * MAX_TEXT)
    while not isinstance(refused := s.engine.handle(webbed, s.now, NARRATOR), RuleError):
        pass  # conditions fill what room one more combatant did not
    before = s.state
    assert refused.code == "combat_too_large"
    assert s.refuse(webbed).code == "combat_too_large"  # Story.refuse: nothing changed
    assert s.state is before


def test_a_combat_full_of_content_can_still_be_played_and_its_view_fits() -> None:
    """Play adds no refusable content: rolls, the order, turns and holds fit the room kept."""
    s = filled()
    for combatant in s.state.combatants:
        s.roll(combatant.id, 2, 3, 4)
    s.do(c.StartCombat())
    for _ in range(len(s.state.combatants)):
        s.do(c.Hold(s.turn))
    assert len(s.state.holds) == len(s.state.combatants) - 1
    assert view_bytes(s) <= MAX_VIEW_BYTES
    s.do(c.Undo())


def test_the_encoded_size_is_what_the_codec_writes() -> None:
    values: list[Plain] = [
        None,
        True,
        *(v for b in (5, 7, 8, 15, 16, 31, 32) for v in (2**b - 1, 2**b, -(2**b), -(2**b) - 1)),
        2**64 - 1,
        -(2**63),
        1.5,
        *("é" * n for n in (0, 15, 16, 127, 128, 32767, 32768)),
        list(range(15)),
        list(range(16)),
        list(range(70_000)),
        {str(i): [i, None] for i in range(15)},
        {str(i): {"x": i} for i in range(16)},
        to_plain(view(filled().state, NARRATOR)),
    ]
    for value in values:
        assert encoded_size(value) == len(msgpack.packb(value, use_bin_type=True))


def test_every_view_fits_one_message_with_its_response() -> None:
    largest_response = wire.Response(
        wire.MAX_MSGID, None, {"combat": BIG, "seq": 2**53, "view": "v" * MAX_VIEW_BYTES}
    )
    assert len(wire.pack(largest_response)) <= wire.MAX_MESSAGE_BYTES


def test_r16_the_record_of_hidden_stretches_is_bounded() -> None:
    """Adding and undoing hidden combatants, or revealing and undoing, cannot grow the record
    of what was hidden when (R16) without bound: past MAX_SECRETS both are refused."""
    s = Story("marvel")
    s.add("lurker", hidden=True)
    while len(s.state.secrets) < MAX_SECRETS:
        s.do(c.RevealCombatant("lurker"))
        s.do(c.Undo())  # hidden again: a new stretch
    for command, field in (
        (c.RevealCombatant("lurker"), "combatant"),
        (c.AddCombatant("shade", "Shade", hidden=True), "hidden"),
    ):
        refused = s.refuse(command)
        assert (refused.code, refused.field) == ("too_many_secrets", field)
    s.add("ogre")  # a visible one is still welcome


def brimful() -> Story:
    """A full combat (``filled``) topped up with conditions until not one more byte fits: the
    last one's note as long as fits."""
    s = filled()
    who = s.state.combatants[0].id
    added = 0
    while _fits(s, _noted(who, MAX_TEXT)):
        s.do(_noted(who, MAX_TEXT))
        added += 1
    assert added, "the last combatant left no room for a condition: the top-up needs one"
    if not _fits(s, _noted(who, 1)):
        # Less room than the shortest condition takes: the last one back, and half of it.
        s.do(c.Undo())
        s.do(_noted(who, MAX_TEXT // 2))
    low, high = 1, MAX_TEXT
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _fits(s, _noted(who, middle)) else (low, middle - 1)
    s.do(_noted(who, low))
    return s


DECIDING: dict[str, Any] = {"dice": SeededDice(0), "rules": BUNDLED_RULES}


def _fits(s: Story, command: c.Command) -> bool:
    return not isinstance(decide(s.state, command, s.now, **DECIDING), RuleError)


def _noted(who: str, size: int) -> c.ApplyCondition:
    return c.ApplyCondition(who, "custom", note="x" * size)


def _room(state: State) -> int:
    """What ``check_size`` keeps for play besides the view, as protocol.md says."""
    longest = max(encoded_size(k.id) for k in state.combatants)
    return PLAY_FIXED + PLAY_PLUGINS + len(state.combatants) * (PLAY_BYTES + PLAY_IDS * longest)


def test_a_combat_grown_to_its_last_byte_is_taken_and_one_byte_more_is_refused() -> None:
    """The size check is exact at the limit, whatever it measured before: the note that brings
    the view with room for play to ``MAX_VIEW_BYTES`` exactly fits, one character more does
    not, and a state that carries no measure of its own (a snapshot's) says the same."""
    s = brimful()
    last = s.state.conditions[-1]
    assert view_bytes(s) + _room(s.state) == MAX_VIEW_BYTES
    s.do(c.RemoveCondition(last.id))
    assert s.state.measured is not None  # as measured with ``last``: it measures the change
    for state in (s.state, dataclasses.replace(s.state, measured=None)):
        refused = decide(state, _noted(last.target, len(last.note) + 1), s.now, **DECIDING)
        assert isinstance(refused, RuleError)
        assert refused.code == "combat_too_large"
        assert f"{MAX_VIEW_BYTES + 1} bytes" in refused.message
        fitting = decide(state, _noted(last.target, len(last.note)), s.now, **DECIDING)
        assert not isinstance(fitting, RuleError)
    s.do(_noted(last.target, len(last.note)))
    assert view_bytes(s) + _room(s.state) == MAX_VIEW_BYTES


def test_disabling_a_plugin_is_never_refused_for_size_and_at_most_32_are_disabled() -> None:
    """The daemon disables a failing plugin with disable_plugin: a combat full to the brim
    takes it all the same (room is kept for it), up to MAX_DISABLED_PLUGINS names as long as
    allowed, and its view still fits."""
    s = brimful()
    assert s.refuse(_noted(s.state.combatants[0].id, 1)).code == "combat_too_large"
    for i in range(MAX_DISABLED_PLUGINS):
        s.do(c.DisablePlugin(f"{i:02d}{BIG[: MAX_NAME - 2]}", "x" * MAX_TEXT))
    assert len(s.state.disabled_plugins) == MAX_DISABLED_PLUGINS
    assert view_bytes(s) <= MAX_VIEW_BYTES
    refused = s.refuse(c.DisablePlugin("one-more"))
    assert (refused.code, refused.field) == ("too_many_plugins_disabled", "plugin")
    s.do(c.EnablePlugin(s.state.disabled_plugins[0]))
    s.do(c.DisablePlugin("one-more"))


def test_the_encoded_size_of_every_value_is_what_the_codec_writes_of_its_plain_form() -> None:
    # ``encoded_size`` sizes a model value by its class's own sizer, without making its plain
    # form: a state and a view full of content, and every event of a combat in play.
    full = filled().state
    s = Story("marvel")
    s.add("a", hidden=True)
    s.add("b", tags=("x",))
    s.roll("a", 6, 6, 6)
    s.roll("b", 2, 2, 2)
    s.do(c.StartCombat())
    s.do(c.ApplyCondition("a", "custom", note="é" * 40))
    s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("b",))))
    for value in (full, view(full, NARRATOR), *s.log, s.state):
        assert encoded_size(value) == len(msgpack.packb(to_plain(value), use_bin_type=True))
