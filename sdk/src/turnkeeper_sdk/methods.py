"""The protocol's methods, each declared once: name, kind, the API level it appeared at, its
summary, who may call it and its params.

Command methods come from the engine's commands (``turnkeeper_engine.commands``): a command's
wire name, its docstring's first paragraph as the summary, its fields as the params and its
``who``. Session and query methods are declared here. Everything that lists methods is made
from or checked against :data:`METHODS`: the daemon's ``hello`` and dispatch, the async
client's typed command methods (generated: ``python -m turnkeeper_sdk.aio._generate``), the
JavaScript client's method table (generated too) and typings, and protocol.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from turnkeeper_engine.commands import COMMANDS, Command

__all__ = [
    "COMMAND_ENVELOPE",
    "COMMAND_METHODS",
    "METHODS",
    "QUERY_METHODS",
    "SESSION_METHODS",
    "TABLE_METHODS",
    "WHO_TEXT",
    "Kind",
    "Method",
    "Param",
    "Who",
    "command_method",
]

Kind = Literal["session", "query", "table", "command"]
"""``session`` (hello), ``query`` (reads, no ``request_id``), ``table`` (tables and their
tokens, no ``request_id``) or ``command`` (an engine command)."""

Who = Literal["anyone", "any_role", "host", "narrator", "controller"]
"""Who may call a method: ``anyone`` (before authenticating too), ``any_role`` (every
authenticated role), ``host`` (the operator, and a hosting bridge for the tables it manages),
or a command's own ``who`` (``narrator``, ``controller``)."""

WHO_TEXT: Mapping[Who, str] = {
    "anyone": "anyone, before authentication too",
    "any_role": "any role",
    "host": "the operator; a hosting bridge, for the tables it manages",
    "narrator": "narrator",
    "controller": "narrator; a player for its own combatant",
}
"""Each ``who`` as protocol.md and the client's docstrings say it (after ``Who:``)."""


@dataclass(frozen=True, slots=True)
class Param:
    """One param of a method: its name, its type (a Python annotation), whether it is required,
    and the value meant when it is left out."""

    name: str
    type: Any
    required: bool
    default: Any = None


@dataclass(frozen=True, slots=True)
class Method:
    """One protocol method. ``hello`` lists ``name``, ``kind``, ``since`` and ``summary``."""

    name: str
    kind: Kind
    since: int
    summary: str
    who: Who
    params: tuple[Param, ...]
    """The method's own params; a command's are its fields (the envelope is
    :data:`COMMAND_ENVELOPE`)."""


def _p(name: str, type_: Any, default: Any = None, *, required: bool = False) -> Param:
    return Param(name, type_, required, default)


SESSION_METHODS = (
    Method(
        "hello",
        "session",
        1,
        "Open the session: versions, credentials, metadata.",
        "anyone",
        (
            _p("protocol", int, required=True),
            _p("token", str),
            _p("client", Mapping[str, str]),
            _p("locale", str),
            _p("narrate", bool, False),
        ),
    ),
)
QUERY_METHODS = (
    Method(
        "list_combats",
        "query",
        1,
        "Every combat, with its phase, round and last seq.",
        "any_role",
        (_p("after", str), _p("limit", int)),
    ),
    Method(
        "get_combat",
        "query",
        1,
        "A combat as the caller may see it, with its last seq.",
        "any_role",
        (_p("combat", str, required=True),),
    ),
    Method(
        "history",
        "query",
        1,
        "Recorded events after a seq, as the caller may see them.",
        "any_role",
        (_p("combat", str, required=True), _p("after", int, 0), _p("limit", int, 100)),
    ),
    Method(
        "subscribe",
        "query",
        1,
        "Missed events after a seq, then live ones.",
        "any_role",
        (_p("combat", str, required=True), _p("after", int, 0)),
    ),
    Method(
        "unsubscribe",
        "query",
        1,
        "Stop the events of a combat.",
        "any_role",
        (_p("combat", str, required=True),),
    ),
    Method(
        "subscribe_all",
        "query",
        1,
        "Live events of every combat, new ones included.",
        "any_role",
        (_p("limit", int),),
    ),
    Method("unsubscribe_all", "query", 1, "Stop the events of subscribe_all.", "any_role", ()),
    Method(
        "list_plugins",
        "query",
        1,
        "The daemon's plugins: loaded (with counters), failed, skipped.",
        "any_role",
        (),
    ),
)

TABLE_METHODS = (
    Method(
        "create_table",
        "table",
        1,
        "Make a table; its maker manages it.",
        "host",
        (_p("name", str, required=True),),
    ),
    Method("list_tables", "table", 1, "The tables the caller manages.", "host", ()),
    Method(
        "add_token",
        "table",
        1,
        "Make a token of a table; its secret is in this answer only.",
        "host",
        (
            _p("table", str, required=True),
            _p("role", str, required=True),
            _p("user", str),
            _p("narrator", bool, False),
        ),
    ),
    Method(
        "list_tokens",
        "table",
        1,
        "The tokens of a table (never their secrets).",
        "host",
        (_p("table", str, required=True),),
    ),
    Method(
        "revoke_token",
        "table",
        1,
        "Revoke a token of a table: its sessions end.",
        "host",
        (_p("table", str, required=True), _p("id", str, required=True)),
    ),
)

COMMAND_ENVELOPE = (
    _p("combat", str, required=True),
    _p("request_id", str, required=True),
    _p("as", str),
)
"""What every command method takes besides its command's fields; ``create_combat`` takes no
``combat`` (its field ``combat_id`` names the new one)."""


def _summary(cls: type[Command]) -> str:
    """The first paragraph of a command's docstring, on one line, with the page's markup
    (``x`` reads `x`)."""
    first = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
    return " ".join(first.split()).replace("``", "`")


def command_method(cls: type[Command]) -> Method:
    """The method of an engine command: the command's name, summary, ``who`` and fields."""
    hints = typing.get_type_hints(cls)
    params = tuple(
        Param(f.name, hints[f.name], True)
        if f.default is dataclasses.MISSING
        else Param(f.name, hints[f.name], False, f.default)
        for f in dataclasses.fields(cls)
    )
    return Method(cls.name, "command", 1, _summary(cls), cls.who, params)


COMMAND_METHODS = tuple(command_method(cls) for cls in COMMANDS.values())

METHODS: Mapping[str, Method] = {
    m.name: m for m in (*SESSION_METHODS, *QUERY_METHODS, *TABLE_METHODS, *COMMAND_METHODS)
}
"""Every protocol method by wire name, in the order ``hello`` lists them."""
