"""The protocol's methods as the daemon reads their params.

Each method is declared once, in the SDK (:mod:`turnkeeper_sdk.methods`, re-exported here):
name, kind, since, summary, who may call it, params. Every engine command is a method of the
same name; its params are the command's fields plus ``combat``, ``request_id`` and, for
bridges, ``as``. The rest are queries and session methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnkeeper_engine import commands as cmd
from turnkeeper_engine.plain import PlainError, from_plain
from turnkeeper_sdk.methods import COMMAND_METHODS, METHODS, QUERY_METHODS, SESSION_METHODS, Method

from .combats.errors import RequestError

__all__ = [
    "COMMAND_METHODS",
    "MAX_HISTORY_PAGE",
    "MAX_ID_CHARS",
    "METHODS",
    "QUERY_METHODS",
    "SESSION_METHODS",
    "Method",
    "command",
    "number",
    "text",
]

MAX_ID_CHARS = 128
"""Longest combat or request id: ids are keys, not documents."""
MAX_HISTORY_PAGE = 1000
"""Most events one ``history`` call returns; page with ``after``."""


def text(params: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    """The id param ``name``: a string of 1 to ``MAX_ID_CHARS`` characters, or ``None`` when
    left out and not ``required``."""
    value = params.get(name)
    if value is None:
        if required:
            raise RequestError("invalid_params", "is required", name)
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise RequestError(
            "invalid_params", "a string of 1 to {limit} characters", name, limit=MAX_ID_CHARS
        )
    if "\x00" in value:
        # A key of the store's: PostgreSQL's text cannot hold NUL, and no id needs one.
        raise RequestError("invalid_params", "must not contain the NUL character", name)
    return value


def number(params: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """The integer param ``name`` (``default`` when left out), from ``low`` to ``high``."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(
            "invalid_params", "an integer from {low} to {high}", name, low=low, high=high
        )
    return value


_ENVELOPE = frozenset({"combat", "request_id", "as"})


def command(method: str, params: Mapping[str, Any]) -> tuple[str, cmd.Command]:
    """The combat a command method targets and the engine command it carries."""
    cls = cmd.COMMANDS[method]
    fields = {k: v for k, v in params.items() if k not in _ENVELOPE}
    try:
        command_value: cmd.Command = from_plain(cls, fields)
    except PlainError as e:
        raise RequestError.relay(e, "invalid_params", e.field) from e
    # ``type(…) is``: a command's class is its kind, and a failed ``isinstance`` looks up the
    # value's ``__class__`` besides, on every command.
    if type(command_value) is cmd.CreateCombat:
        combat_id = text(params, "combat_id")
    else:
        combat_id = text(params, "combat")
    assert combat_id is not None
    return combat_id, command_value
