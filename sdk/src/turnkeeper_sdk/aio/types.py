"""The async client's results: the protocol's plain data as decoded, typed. Typed dicts keep the
keys a newer daemon adds."""

from __future__ import annotations

from typing import Any, TypedDict

Event = dict[str, Any]
"""An event as delivered to a subscriber: ``{"combat", "seq", "event", ...its fields}``."""


class CommandResult(TypedDict):
    """An accepted command: its combat, the combat's last seq after it, and the command's events
    as the caller may see them (``{"seq", "event", ...fields}``, the first ``command_recorded``).
    A ``tick`` with nothing due has no events and the unchanged seq."""

    combat: str
    seq: int
    events: list[dict[str, Any]]


class CombatSnapshot(TypedDict):
    """``get_combat``'s result: the combat's ``view`` as the caller may see it, at ``seq``."""

    combat: str
    seq: int
    view: dict[str, Any]


class HistoryPage(TypedDict):
    """``history``'s result: events after ``after`` up to ``until`` (page on from ``until``
    until it reaches ``seq``, the combat's last seq), each ``{"seq", "event", ...fields}``."""

    combat: str
    seq: int
    until: int
    events: list[dict[str, Any]]
