"""The engine's values: immutable, updated by ``model.replace`` as ``dataclasses.replace`` would
update them, and a state's size memo is never part of the combat."""

from __future__ import annotations

import dataclasses

import pytest

from story import Story
from turnkeeper_engine import State, from_plain, model, to_plain
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import Clock, Condition, Reroll, replace


def _condition() -> Condition:
    return Condition("c1", "custom", "k", None, (Clock("k", "end", 2),), note="n")


def test_replace_makes_what_dataclasses_replace_makes_and_leaves_the_original() -> None:
    s = Story("marvel")
    s.add("k")
    s.do(c.ApplyCondition("k", "custom"))
    state = s.state
    changed = replace(state, serial=99, last_command="x")
    assert changed == dataclasses.replace(state, serial=99, last_command="x")
    assert (changed.serial, state.serial) == (99, s.state.serial)
    assert changed.combatants is state.combatants
    assert replace(_condition(), note="m") == dataclasses.replace(_condition(), note="m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.serial = 1  # type: ignore[misc]


def test_replace_keeps_a_field_whose_name_the_generated_function_could_use() -> None:
    # Reroll has a field called ``new``: the generated function's own names must not shadow it.
    roll = Reroll("edge", 1, 2, 5, 5)
    assert replace(roll) == roll
    assert replace(roll, new=6) == dataclasses.replace(roll, new=6)
    assert replace(roll, new=6).new == 6


def test_every_model_class_has_only_names_replace_can_take() -> None:
    classes = [
        v for v in vars(model).values() if dataclasses.is_dataclass(v) and isinstance(v, type)
    ]
    assert Reroll in classes
    for cls in classes:
        assert not [f.name for f in dataclasses.fields(cls) if f.name.startswith("_")], cls


def test_replace_refuses_a_field_the_value_does_not_have() -> None:
    with pytest.raises(TypeError):
        replace(_condition(), colour="red")


def test_the_size_memo_is_never_encoded_nor_compared() -> None:
    s = Story("marvel")
    s.add("k")
    s.do(c.ApplyCondition("k", "custom"))  # a content command: the size check measures
    state = s.state
    assert state.measured is not None
    plain = to_plain(state)
    assert isinstance(plain, dict)
    assert "measured" not in plain
    decoded = from_plain(State, plain)
    assert decoded == state
    assert decoded.measured is None
    with pytest.raises(ValueError, match="unknown field"):
        from_plain(State, {**plain, "measured": None})


def test_maker_and_replacer_make_what_the_class_and_replace_make() -> None:
    # They make a value as a draft of its class and then give it its class (``model._draft``):
    # the value must be the class's own, frozen, equal to the one ``__init__`` makes.
    made = model.maker(Condition)("c1", "custom", "k", None, (Clock("k", "end", 2),), (), "n")
    assert type(made) is Condition
    assert made == _condition()
    assert hash(made) == hash(_condition())
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.note = "m"  # type: ignore[misc]
    with_note = model.replacer(Condition, "note", "target")(made, "m", "j")
    assert with_note == dataclasses.replace(_condition(), note="m", target="j")
    assert made.note == "n"
    with pytest.raises(TypeError):
        model.replacer(Condition, "colour")


def test_replace_makes_an_event_whose_field_its_base_class_declares() -> None:
    # ``condition_removed`` has its ``combatant`` field, and its slot, from a base class.
    removed = ev.ConditionRemoved("k", "c1", "custom", "removed")
    expired = replace(removed, reason="expired", combatant="j")
    assert type(expired) is ev.ConditionRemoved
    assert expired == dataclasses.replace(removed, reason="expired", combatant="j")
    assert expired.subjects() == ("j",)
