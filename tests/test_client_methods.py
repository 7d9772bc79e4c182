"""The async client stays true to the protocol: a method for every protocol method the daemon
has, and each command method's keyword parameters exactly its command's fields."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from turnkeeper.methods import METHODS
from turnkeeper_engine.commands import COMMANDS
from turnkeeper_sdk.aio import AsyncClient

ENVELOPE = ("request_id", "as_user")
"""Keyword parameters every command method has besides its command's fields."""

COMMAND_METHODS = sorted(name for name, method in METHODS.items() if method.kind == "command")


def test_every_protocol_method_has_a_client_method() -> None:
    missing = [name for name in METHODS if not callable(getattr(AsyncClient, name, None))]
    assert missing == []


@pytest.mark.parametrize("name", COMMAND_METHODS)
def test_a_command_methods_keywords_are_its_commands_fields_with_their_defaults(
    name: str,
) -> None:
    parameters = list(inspect.signature(getattr(AsyncClient, name)).parameters.values())
    keywords = [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    fields = dataclasses.fields(COMMANDS[name])
    assert [p.name for p in keywords] == [f.name for f in fields] + list(ENVELOPE)
    for parameter, field in zip(keywords, fields, strict=False):
        if field.default is dataclasses.MISSING:
            assert parameter.default is inspect.Parameter.empty, field.name
        else:
            assert parameter.default == field.default, field.name
    assert all(p.default is None for p in keywords[len(fields) :])


@pytest.mark.parametrize("name", COMMAND_METHODS)
def test_a_command_method_names_its_combat_first_except_create_combat(name: str) -> None:
    parameters = inspect.signature(getattr(AsyncClient, name)).parameters.values()
    positional = [p.name for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == (["self"] if name == "create_combat" else ["self", "combat"])


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_client_method_is_documented(name: str) -> None:
    assert (getattr(AsyncClient, name).__doc__ or "").strip()


def test_a_subscription_buffer_holds_at_least_one_event() -> None:
    async def never() -> Any:
        raise AssertionError("not connected in this test")

    with pytest.raises(ValueError, match="event_buffer must be at least 1"):
        AsyncClient(never, event_buffer=0)
