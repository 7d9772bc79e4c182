"""Which combats the daemon holds: lookup by id, room for a new one (``MAX_COMBATS``),
quarantine, and pages in id order."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import islice

import anyio
import structlog

from ..store import StoreError
from ..tables import Scope
from .combat import Combat
from .deadlines import Deadlines
from .errors import RequestError

log = structlog.get_logger("turnkeeper.combats")

MAX_COMBATS = 100_000
"""Combats one daemon holds (ended ones included): at about 10 KiB each, a bound of a few GiB
of memory, far above what any group of tables plays."""

MAX_COMBAT_PAGE = 500
"""Most combats one ``list_combats`` page or ``subscribe_all`` answer names. Its longest rows
(an id of 128 four-byte characters, a ruleset name as long, or a quarantine reason cut to
``MAX_REASON_CHARS``) take under 1.4 KiB each, so a page stays far inside the message limit."""


def unknown_combat(combat_id: str) -> RequestError:
    """The refusal of a combat there is none of, or none the caller may know of (a combat of
    another table is refused in these very words)."""
    return RequestError("unknown_combat", "no combat {id!r}", "combat", id=combat_id)


def too_large() -> RequestError:
    """The refusal of a page asked without ``limit`` that would name more than
    ``MAX_COMBAT_PAGE`` combats."""
    return RequestError(
        "result_too_large",
        "more than {limit} combats: page with after and limit",
        "limit",
        limit=MAX_COMBAT_PAGE,
    )


def usable(combat: Combat) -> Combat:
    """``combat``, refused if quarantined."""
    if combat.quarantined is not None:
        # The reason is a diagnostic (what failed to decode, and how): told as it is.
        raise RequestError("combat_quarantined", "{reason}", "combat", reason=combat.quarantined)
    return combat


class Combats:
    """Every combat of the daemon by id, and their ids sorted for paging. A combat's deadline
    is the clock's to know (``deadlines``): quarantining one takes it off."""

    def __init__(self, deadlines: Deadlines) -> None:
        self.by_id: dict[str, Combat] = {}
        self.ids: list[str] = []
        """Every combat's id, sorted: pages of combats are read from it by id (code points)."""
        self.by_table: dict[str, list[str]] = {}
        """The ids of each table's combats, sorted likewise: a table's page is read from its
        own list, however many combats other tables have."""
        self._pending: dict[str, anyio.Event] = {}
        """Combats being created (their first command on its way to the store), each holding
        its id and its room until it is added or refused; the event is set then."""
        self._deadlines = deadlines

    def __len__(self) -> int:
        return len(self.by_id)

    def known(self, combat_id: str) -> Combat:
        """The combat of that id, rebuilt or not; refused if there is none."""
        found = self.by_id.get(combat_id)
        if found is None:
            raise unknown_combat(combat_id)
        return found

    @asynccontextmanager
    async def creating(self, combat_id: str) -> AsyncIterator[None]:
        """Hold ``combat_id`` and room for it while its first command commits, up to ``add``;
        refused if it exists or the daemon holds ``MAX_COMBATS``. Creations of other ids go on
        beside it, so they share the store's group commits (one at a time, each waited for
        its own transaction: creating ran at under half the rate of other commands). A
        creation that can only be judged by this one's outcome (the same id, or the last room
        held by creations in flight) waits for it, so it is answered as if they ran in turn."""
        pending = self._pending
        while True:
            if combat_id in pending:
                await pending[combat_id].wait()
            elif pending and len(self.by_id) + len(pending) >= MAX_COMBATS:
                await next(iter(pending.values())).wait()
            else:
                break
        if combat_id in self.by_id:
            raise RequestError("combat_exists", "combat {id!r} exists", "combat_id", id=combat_id)
        if len(self.by_id) >= MAX_COMBATS:
            raise RequestError(
                "too_many_combats", "at most {limit} combats", "combat_id", limit=MAX_COMBATS
            )
        pending[combat_id] = done = anyio.Event()
        try:
            yield
        finally:
            del pending[combat_id]
            done.set()

    def has_room(self) -> bool:
        """Whether another combat may be known (``MAX_COMBATS``, creations in flight
        counted)."""
        return len(self.by_id) + len(self._pending) < MAX_COMBATS

    def add(self, combat: Combat) -> None:
        """Hold a new combat (its first command is committed)."""
        self.by_id[combat.id] = combat
        bisect.insort(self.ids, combat.id)
        bisect.insort(self.by_table.setdefault(combat.table, []), combat.id)

    def recovered(self, combats: list[Combat]) -> None:
        """Hold the combats a start found, and put their deadlines on the clock's heap."""
        for combat in combats:
            self.by_id[combat.id] = combat
        self.ids = sorted(self.by_id)
        self.by_table = {}
        for combat_id in self.ids:
            self.by_table.setdefault(self.by_id[combat_id].table, []).append(combat_id)
        for combat in combats:
            self._deadlines.moved(combat)

    def quarantine(self, combat: Combat, error: StoreError) -> StoreError | RequestError:
        """Quarantine a served combat whose stored log turned out unreadable where a read
        reached it (history, a catch-up): its answer is the refusal to raise. A store that
        could not be reached (``store_unavailable``) damaged nothing: that error is the
        answer, and the combat stays as it is."""
        if error.code == "store_unavailable":
            return error
        return self.set_aside(combat, error.message)

    def set_aside(self, combat: Combat, reason: str) -> RequestError:
        """Quarantine ``combat`` for ``reason`` (kept aside for the operator, every read of it
        refused from now on): the refusal to raise."""
        combat.quarantined = reason
        self._deadlines.moved(combat)
        log.error("combat_quarantined", combat=combat.id, reason=reason)
        return RequestError("combat_quarantined", "{reason}", "combat", reason=reason)

    def _lists(self, scope: Scope) -> list[list[str]]:
        if scope is None:
            return [self.ids]
        return [self.by_table[t] for t in scope if t in self.by_table]

    def page(self, after: str | None, limit: int | None, scope: Scope = None) -> list[Combat]:
        """The combats of ``scope``'s tables (None: every table) whose ids sort after
        ``after`` (all with None), in id order: ``limit`` of them at most, or every one,
        refused when that is more than ``MAX_COMBAT_PAGE``. Ids sort by code point, so a page
        read later starts where the last ended, whatever was created in between or since a
        restart."""
        lists = self._lists(scope)
        starts = [0 if after is None else bisect.bisect_right(ids, after) for ids in lists]
        if (
            limit is None
            and sum(len(ids) - s for ids, s in zip(lists, starts, strict=True)) > MAX_COMBAT_PAGE
        ):
            raise too_large()
        return self._first(lists, starts, MAX_COMBAT_PAGE if limit is None else limit)

    def first(self, after: str | None, count: int, scope: Scope = None) -> list[Combat]:
        """Up to ``count`` combats of ``scope``'s tables whose ids sort after ``after``, in
        id order, however many there are."""
        lists = self._lists(scope)
        starts = [0 if after is None else bisect.bisect_right(ids, after) for ids in lists]
        return self._first(lists, starts, count)

    def _first(self, lists: list[list[str]], starts: list[int], size: int) -> list[Combat]:
        if len(lists) == 1:
            page = lists[0][starts[0] : starts[0] + size]
        else:
            # A hosting bridge's tables: their sorted lists merged, only as far as the page.
            runs = (islice(ids, s, None) for ids, s in zip(lists, starts, strict=True))
            page = list(islice(heapq.merge(*runs), size))
        return [self.by_id[i] for i in page]

    def visible(self, combat_id: str, scope: Scope) -> bool:
        """Whether a session of ``scope`` may know of ``combat_id`` (True when there is no
        such combat: the caller then gets the answer any unknown combat gets)."""
        if scope is None:
            return True
        found = self.by_id.get(combat_id)
        return found is None or found.table in scope
