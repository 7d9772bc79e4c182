"""What the daemon needs of a store: the port both the SQLite store (``turnkeeper.store``) and
the PostgreSQL one (``turnkeeper.stores.postgresql``) satisfy, and the one test suite
(``tests/test_store_port.py``) holds them to.

The values that cross it (``Batch``, ``LoadedCombat``, ``StoreError``) are the SQLite store's,
which came first; every store raises the same ``StoreError`` codes for the same causes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol, runtime_checkable

from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream

from ..store import FIRST_EPOCH, Batch, LoadedCombat, StoreError


class ListedCombat(NamedTuple):
    """A combat as a shared store lists it (``SharedStore.combat_page``): its row and its last
    summary (None if it has none or the summary does not decode)."""

    combat_id: str
    table: str
    ruleset: str
    seq: int
    summary: Any


class StorePort(Protocol):
    """A durable log of every combat, with remembered requests, snapshots and summaries.

    Lifecycle: open (each store's own ``open``) → ``await task_group.start(store.run)`` →
    start-up recovery (``summaries``, then ``load_one`` and ``replay`` per combat, from worker
    threads) → ``commit``, ``lookup_request`` and ``events_after`` from any task →
    ``await stop()`` → ``close``.

    Guarantees every store gives: ``commit`` returns only once the batch is durable, and
    batches queued together share one transaction; a batch that does not fit the log (seq
    taken or skipped, combat unknown or already there, request id stored) is refused alone
    with ``conflict``; a full store refuses the whole transaction with ``store_full``; a
    request's answer is remembered across restarts (``lookup_request``); a gap in a combat's
    log quarantines that combat alone (``LoadedCombat.quarantined``), and an event that does
    not decode fails the read that meets it with ``store_failed``.
    """

    transactions: int
    """Write transactions run so far (group commit makes this smaller than batches)."""

    async def run(self, *, task_status: TaskStatus[None] = ...) -> None:
        """The committer, until ``stop``; start it with ``task_group.start``."""

    async def commit(self, batch: Batch) -> None:
        """Make ``batch`` durable; return only once it is committed (else raise
        ``StoreError``)."""

    async def stop(self) -> None:
        """Accept no more commits; return once everything queued is committed."""

    def close(self) -> None:
        """Release the store; after ``run`` has returned, or if it never ran."""

    async def lookup_request(self, principal: str, request_id: str) -> tuple[str, Any] | None:
        """The combat id and response remembered for a retried request, or None."""

    def summaries(self) -> list[tuple[str, Any]]:
        """Every combat in creation order with its last summary (None if none or unreadable)."""

    def memberships(self) -> dict[str, str]:
        """The table of every combat not of the default table, by combat id (start-up)."""

    def load_one(self, combat_id: str) -> LoadedCombat:
        """One combat as found at start-up (any thread, one call at a time)."""

    def replay(self, combat_id: str, after: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """The combat's events after ``after``, decoded and in order (any thread)."""

    async def events_after(
        self, combat_id: str, seq: int, limit: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``limit`` events of the combat after ``seq``; never blocks the event loop
        for longer than a page of a local file takes."""


@runtime_checkable
class SharedStore(StorePort, Protocol):
    """A store many daemons share (the PostgreSQL one): each combat is leased by one daemon at
    a time. ``load_one`` acquires the combat's lease first (asking its holder to let it go,
    or waiting for a dead holder's to run out); a commit for a combat whose lease this daemon
    does not hold, or holds at another epoch than its batch's (``Batch.epoch``), is refused
    with ``combat_moved``, nothing of it kept.

    A request id is checked by the commit that stores it, not only by a read before: a batch
    whose id any daemon stored already is refused alone with ``conflict``, nothing of it kept,
    so a command may be decided on ``recent_request``'s None and its repeat found there
    (then ``lookup_request`` reads the first answer). A store ``alone`` on its database looks
    ids up first: its filter rules a new one out without a read."""

    def recent_request(self, principal: str, request_id: str) -> tuple[str, Any] | None:
        """The combat id and response this daemon remembers in memory for a request id, or
        None: without a read, so None does not say no daemon stored it."""

    @property
    def alone(self) -> bool:
        """Whether no other daemon has used the database since this one started, as far as
        it has seen: then ``lookup_request`` rules a never-stored id out without a read."""

    def acquire(self, combat_id: str) -> None:
        """Take the combat's lease unless it is held, as ``load_one`` does first (any thread;
        may wait for the holder to let it go)."""

    def adopt_due(self, now: float) -> list[str]:
        """Take the leases of combats due at ``now`` that no live daemon holds; their ids
        (any thread)."""

    def release_requests(self) -> MemoryObjectReceiveStream[str]:
        """The combats other daemons ask this one to let go of, as they come."""

    def hold_left(self, combat_id: str) -> float:
        """Seconds before this daemon may let the combat go (a minimum hold)."""

    def stale_request(self, combat_id: str) -> bool:
        """Whether the requests to let the combat go are about an older lease than the one
        this daemon holds (then they are dropped, and the lease kept)."""

    async def release(self, combat_id: str) -> None:
        """Give the combat's lease back, after its last commit."""

    def locate(self, combat_id: str) -> str | None:
        """The table of a combat another daemon made, or None if there is none (any thread)."""

    def read_one(self, combat_id: str) -> LoadedCombat:
        """``load_one`` without the lease: the log as it stands (a followed combat)."""

    def changed_since(
        self, watermark: int, after: str, count: int
    ) -> tuple[int, list[tuple[str, int, str, int]]]:
        """The watermark to ask from next, and up to ``count`` combats changed at
        ``watermark`` or later (past ``after`` among those of ``watermark`` itself), in order
        of their change then id, each with its last seq, table and change (any thread)."""

    def horizon(self) -> int:
        """A watermark from which ``changed_since`` finds every change not committed yet
        (any thread)."""

    async def combat_page(
        self, after: str | None, count: int, tables: frozenset[str] | None
    ) -> list[ListedCombat]:
        """Up to ``count`` combats of ``tables`` (None: every table) whose ids sort after
        ``after`` (from the first with None), in code-point order of their ids, read in a
        worker thread; ``store_unavailable`` if the server does not answer in time."""

    async def follow_changes(
        self,
        woken: Callable[[dict[str, tuple[int, str | None]] | None], None],
        *,
        task_status: TaskStatus[None] = ...,
    ) -> None:
        """Call ``woken`` with the last seq and the table (None if not told) of each combat
        whose log grew, as any daemon's commits tell it (a wake-up, not the record: some may
        go untold; None says that some may have), until cancelled; start it with
        ``task_group.start`` (then it listens)."""


__all__ = [
    "FIRST_EPOCH",
    "Batch",
    "ListedCombat",
    "LoadedCombat",
    "SharedStore",
    "StoreError",
    "StorePort",
]
