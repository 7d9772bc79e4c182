"""One combat as the daemon holds it: its state, its writer's lock, and what each part of the
combats package keeps about it (the clock's entry, the hooks due, the views read)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

import anyio

from turnkeeper_engine import State, next_deadline
from turnkeeper_engine.pipeline import Applied
from turnkeeper_engine.plain import Plain
from turnkeeper_sdk import wire

from ..tables import DEFAULT_TABLE


@dataclass(slots=True)
class Combat:
    """A combat of the daemon: known from its stored summary until rebuilt (``loaded``)."""

    id: str
    state: State
    seq: int
    snapshot_seq: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """The combat's single writer. Taken without a trip round the event loop when free (the
    usual case: a combat's commands rarely overlap), since its holder awaits the store at
    once anyway; asyncio's own (the daemon serves on asyncio) costs a fifth of an
    ``anyio.Lock``, which checks for cancellation on every acquire, once per command."""
    quarantined: str | None = None
    views: dict[tuple[str, str | None], wire.Packed] = field(default_factory=dict)
    """Views of the state at ``seq`` encoded for the wire, by who may see what: reads
    outnumber writes."""
    views_seq: int = -1
    loaded: bool = True
    """False while only the stored summary is known (see ``Rebuilder.recover``)."""
    loading: anyio.Event | None = None
    """Set while a task rebuilds the combat: the others that need it wait for that one."""
    summary: dict[str, Plain] | None = None
    clock_after: float = 0.0
    """The clock ticks this combat no earlier than this (``MAX_CLOCK_EVENTS_PER_SECOND``)."""
    clock_due: float | None = None
    """When the clock's heap holds this combat due (its next deadline, not before
    ``clock_after``), or None when it is not on the heap."""
    clock_ticket: int = 0
    """The ticket of this combat's one live entry on the clock's heap: entries with another
    are outdated, and dropped when they come up."""
    hooks_due: deque[tuple[Applied, bool]] = field(default_factory=deque)
    """Committed commands whose plugin hooks have not run yet, in commit order, each with
    whether it holds a place in its worker's ``HOOK_QUEUE`` (a client's command does). The
    combat is on its worker's list while any are due; the worker runs them oldest first."""
    places: int = 0
    """Places this combat's commands hold in its worker's ``HOOK_QUEUE``
    (``HOOK_QUEUE_PER_COMBAT``)."""
    followed: bool = False
    """Not held here (another daemon writes it) but read here: ``state`` is kept at ``seq``
    from the log (``turnkeeper.combats.follow``)."""
    told: int | None = None
    """While what its subscribers here missed is told a page at a time (``Follower._tell``,
    ``state`` and ``seq`` already its end's): the last seq told so far, which a subscriber
    registered meanwhile is answered with and told on from."""
    table: str = DEFAULT_TABLE
    """The table the combat belongs to (``turnkeeper.tables``): set when it is made, never
    changed."""
    epoch: int | None = None
    """On a store many daemons share: the epoch of this daemon's lease ``state`` was read
    under, which each of its batches carries (``Batch.epoch``): a command that waited while
    the combat went to another daemon and came back decides on what was read before, and is
    refused (``combat_moved``) rather than appended after what the other daemon wrote."""


UNBUILT = State()
"""The state of every combat known only from its summary (states are immutable, so one serves
them all): a hundred thousand combats start without a hundred thousand empty states."""


def summary(state: State, seq: int) -> dict[str, Plain]:
    """What start-up needs of a combat before rebuilding it (``StorePort.summaries``)."""
    return {
        "ruleset": state.ruleset,
        "phase": state.phase,
        "round": state.round,
        "seq": seq,
        "deadline": next_deadline(state),
    }


def unchanged(combat: Combat) -> Plain:
    """The result of a command that changed nothing (a tick with nothing due)."""
    return {"combat": combat.id, "seq": combat.seq, "events": []}
