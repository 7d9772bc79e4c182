"""The method table (turnkeeper_sdk.methods) is the one declaration of the protocol's methods:
what the daemon says in ``hello`` and what the engine enforces agree with it."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from story import Story
from turnkeeper.methods import METHODS as DAEMON_METHODS
from turnkeeper_engine import Actor, RuleError
from turnkeeper_engine import commands as c
from turnkeeper_engine.model import ActionSpec, Trigger, TriggerFacts, TurnRef
from turnkeeper_sdk.methods import COMMAND_METHODS, METHODS

ALICE = Actor("player", "alice")
MINE = "mine"
"""Alice's own combatant: a player command naming it passes the permission check (R16)."""
SAMPLES: dict[Any, Any] = {
    str: MINE,
    tuple[str, ...]: (MINE,),
    TurnRef: TurnRef(1, MINE),
    ActionSpec: ActionSpec("attack"),
    Trigger: Trigger("when the door opens"),
    TriggerFacts: TriggerFacts("attack"),
    int | None: 30,
}
"""A value for each type of a required command field, every combatant named being Alice's."""


DICE = 12
"""Faces lined up for a command that Alice may send and that rolls (roll_initiative's 3d6, with
room for rerolls)."""


def _sample(hint: Any) -> Any:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)[0]
    return SAMPLES[hint]


def _command(cls: type[c.Command]) -> c.Command:
    method = METHODS[cls.name]
    return cls(**{p.name: _sample(p.type) for p in method.params if p.required})


def test_the_daemon_serves_the_sdk_declaration() -> None:
    assert DAEMON_METHODS is METHODS


def test_every_engine_command_is_a_command_method_in_its_order() -> None:
    assert [m.name for m in COMMAND_METHODS] == list(c.COMMANDS)


@pytest.mark.parametrize("cls", c.COMMANDS.values(), ids=list(c.COMMANDS))
def test_every_command_says_what_it_does_in_its_own_docstring(cls: type[c.Command]) -> None:
    # A dataclass without a docstring gets its signature as one, which hello would advertise.
    assert not (cls.__doc__ or "").startswith(f"{cls.__name__}("), cls.__name__
    assert METHODS[cls.name].summary.endswith("."), METHODS[cls.name].summary


@pytest.mark.parametrize("cls", c.COMMANDS.values(), ids=list(c.COMMANDS))
def test_the_engine_refuses_a_player_exactly_the_narrator_only_commands_r16(
    cls: type[c.Command],
) -> None:
    story = Story("marvel")
    story.add(MINE, controller="alice")
    story.dice.push(*[3] * DICE)
    result = story.engine.handle(_command(cls), story.now, ALICE)
    refused_as_player = (
        isinstance(result, RuleError) and result.code == "forbidden" and result.field == "actor"
    )
    assert refused_as_player == (METHODS[cls.name].who == "narrator"), result
