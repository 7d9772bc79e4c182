"""The protocol's methods: what each takes, who may call it, and since which API level.

Every engine command is a method of the same name; its params are the command's fields plus
``combat``, ``request_id`` and, for bridges, ``as``. The rest are queries and session methods.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnkeeper_engine import commands as cmd
from turnkeeper_engine.plain import PlainError, from_plain

from .host import RequestError

MAX_ID_CHARS = 128
"""Longest combat or request id: ids are keys, not documents."""
MAX_HISTORY_PAGE = 1000
"""Most events one ``history`` call returns; page with ``after``."""


@dataclass(frozen=True, slots=True)
class Method:
    """One method as ``hello`` lists it."""

    name: str
    kind: str  # "session", "query" or "command"
    since: int
    summary: str


SESSION_METHODS = (
    Method("hello", "session", 1, "Open the session: versions, credentials, metadata."),
)
QUERY_METHODS = (
    Method("list_combats", "query", 1, "Every combat, with its phase, round and last seq."),
    Method("get_combat", "query", 1, "A combat as the caller may see it, with its last seq."),
    Method("history", "query", 1, "Recorded events after a seq, as the caller may see them."),
    Method("subscribe", "query", 1, "Missed events after a seq, then live ones."),
    Method("unsubscribe", "query", 1, "Stop the events of a combat."),
    Method("subscribe_all", "query", 1, "Live events of every combat, new ones included."),
    Method("unsubscribe_all", "query", 1, "Stop the events of subscribe_all."),
    Method(
        "list_plugins", "query", 1, "The daemon's plugins: loaded (with counters), failed, skipped."
    ),
)


def summary(cls: type[cmd.Command]) -> str:
    """A command method's summary in ``hello``: the first paragraph of the command's docstring,
    on one line, with the page's markup (``x`` reads `x`)."""
    first = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
    return " ".join(first.split()).replace("``", "`")


COMMAND_METHODS = tuple(
    Method(name, "command", 1, summary(cls)) for name, cls in cmd.COMMANDS.items()
)
METHODS: Mapping[str, Method] = {
    m.name: m for m in (*SESSION_METHODS, *QUERY_METHODS, *COMMAND_METHODS)
}


def text(params: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise RequestError("invalid_params", "is required", name)
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise RequestError(
            "invalid_params", "a string of 1 to {limit} characters", name, limit=MAX_ID_CHARS
        )
    return value


def number(params: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
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
    if isinstance(command_value, cmd.CreateCombat):
        combat_id = text(params, "combat_id")
    else:
        combat_id = text(params, "combat")
    assert combat_id is not None
    return combat_id, command_value
