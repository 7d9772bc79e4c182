"""The durable store: every combat's event log in one SQLite file, written by one committer task.

A command is acknowledged only after its events are committed, so ``commit`` returns only once its
batch is durable (WAL, ``synchronous=FULL``). Commands arriving together share one transaction
(group commit): one fsync pays for all of them. Bodies are msgpack of the engine's plain data;
this module never sees engine types, so the engine's codec (``turnkeeper_engine.plain``) stays the
only place that knows their shape.

Sequence numbers of a combat's events start at 1 and have no gaps; the committer refuses a batch
that would break that, because start-up recovery quarantines a combat whose log has a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import os
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import msgpack  # type: ignore[import-untyped]
import structlog
from anyio.abc import TaskStatus

from turnkeeper_engine.errors import Arg, ProtocolError

from .private import LockHeldError, exclusive_lock, private_directory, private_file

DB_FILE = "turnkeeper.db"
"""The one database file inside the data directory."""

LOCK_FILE = "turnkeeper.lock"
"""Locked (``flock``, exclusive) by the one process using the data directory, and holding its
pid: two daemons on one store would each number a combat's events from their own memory."""


def _ours(name: str) -> bool:
    """Whether a file of the data directory is Turnkeeper's: the database and its WAL and
    shared memory, the lock, the token file (``tokens.json``, and its ``.tmp`` while saved)."""
    return name.startswith(("turnkeeper.", "tokens."))


SCHEMA_VERSION = 4
"""Written to ``meta`` on creation; a file with another version is refused, never guessed at,
except the older versions ``_migrate`` upgrades in place (``_MIGRATIONS``)."""

DEFAULT_TABLE = "default"
"""The table of every combat stored before tables (``turnkeeper.tables.DEFAULT_TABLE``)."""

COMMIT_QUEUE = 4096
"""Batches waiting for the committer. When full, ``commit`` waits: backpressure reaches the
command handlers instead of memory growing while the disk is slow."""

MAX_BATCHES_PER_COMMIT = 512
"""Batches written in one transaction: enough to amortise the fsync under load, small enough that
one transaction (and the wait of its first command) stays short."""

ROWS_PER_INSERT = 64
"""Most rows one ``INSERT`` of a group commit writes (``_Inserts``). SQLite pays a statement's setup
and end once per execution: its cursors opened and closed, the rowid table's last row sought,
``requests``' AUTOINCREMENT counter read and written back; and the sqlite3 module binds and
resets it, and lets go of the GIL and takes it back around it. An ``executemany`` paid all that
per row, four rows per command: the committer's thread ran 109,000 instructions per command of
``bench_instructions.py`` (about 48 commands per group), 91,600 with statements of up to 64 rows
(up to 32, the same in a test of the inserts alone; up to 8, 6,600 more). Sixty-four rows of five
values stay under the 999 variables a statement may have before SQLite 3.32. A power of two:
``_Inserts`` prepares a statement for each power of two up to it, and splits a group so."""

GATHER_BATCHES = 16
"""Batches a transaction waits for (at most ``GATHER_SECONDS``) when the one before it has just
ended and fewer than this many are queued, but some are: the sign of a steady load, under which
a transaction per handful of batches costs more CPU than the commands themselves (each
transaction costs the committer about 0.5 ms of CPU, and the event loop a hand-off both ways,
whatever its size), and that CPU is taken from the event loop, behind which every command
queues. Sixteen batches make a transaction's cost small beside theirs; more would only lengthen
the wait under a load that fills the window anyway."""

GATHER_SECONDS = 0.001
"""The longest a queued batch waits for others to join its transaction (``GATHER_BATCHES``):
well under the fsync that follows (a few milliseconds on most disks), so it adds little to a
command's latency, while at 1,000 commands/s over 50 connections it doubles the batches in a
transaction (2 to 4) and cuts the daemon's CPU per command by 8%; 2 ms cut it by 12% but
doubled the p99. A lone client never waits for it: its next command finds the queue empty."""

MAX_EVENTS_PER_READ = 1000
"""Most events returned by one ``events_after`` call: reads run on the event loop, so a history
query or a subscriber's catch-up pages through the log instead of stalling every other task."""

REQUEST_MEMORY_SECONDS = 24 * 3600.0
"""How long a request id is remembered for idempotent retries: a client retrying after a
reconnect does so within seconds or minutes; a day covers a laptop that slept overnight."""

MAX_REMEMBERED_REQUESTS = 100_000
"""Request ids remembered per principal, newest kept: the hard bound on what one busy or hostile
principal can make the store hold within ``REQUEST_MEMORY_SECONDS``."""

PRUNE_EVERY_COMMITS = 256
"""Transactions between two prunes of remembered requests: pruning is cheap but not free, and an
answer remembered a little longer than promised does no harm."""

MAX_BOUNDS = 100_000
"""Principals whose count of remembered requests the committer keeps between prunes (an int
each): past it, all are forgotten and counted again when next written."""

PRUNE_MAX_ROWS = 10_000
"""Rows one prune deletes per rule, so a prune after a long busy spell never stalls the committer;
the rest goes in the next rounds."""

WAL_SHARE = 4
"""Under a quota the write-ahead log gets 1/WAL_SHARE of it and the database the rest. The WAL
holds each commit until a checkpoint copies it into the database, and SQLite's own checkpoints
neither keep it under a given size nor shrink its file: without a share of its own it would grow
past any quota. A quarter keeps checkpoints rare under a quota of a few MiB or more."""

ASIDE_OVERDUE = 4
"""Times its usual size (``ASIDE_SNAPSHOTS`` held snapshots, ``EVENTS_MOVE_BYTES``,
``REQUEST_KEYS_EVERY``) that the work aside may grow to while batches keep the queue busy:
past it, it runs between two groups rather than waiting for an empty queue."""

ASIDE_SNAPSHOTS = 4
"""Held snapshots past which the work aside runs between two groups (``ASIDE_OVERDUE`` times
this many), rather than waiting for an empty queue. Not a bound on what is held: each aside
encodes ``ASIDE_SNAPSHOT_SECONDS`` of them, and under a queue that never empties the held
snapshots may reach one per busy combat (the latest each, replacing the one before)."""

ASIDE_SNAPSHOT_SECONDS = 0.002
"""Time one transaction aside (``Store._write_aside``) spends encoding snapshots before it
writes what it has (at least one): every command that arrives meanwhile waits for it, so the
small states of most combats go several at a time, and a large one (62 KB, about 4 ms to
encode) alone."""

CHECKPOINT_SECONDS = 1.0
"""Least time between two rounds of the checkpointer (``_Checkpointer``), which copies the WAL
into the database from a thread and connection of its own. SQLite's own checkpoint (every 1,000
pages) ran inside a ``COMMIT``, on the committer's thread: every command queued behind it waited
for a copy of 4 MB and an fsync of the database. A round every second copies each page written
many times in that second once, and keeps the WAL to about a second of writes."""

WAL_RESTART_BYTES = 16 * 2**20
"""Frames in the WAL past which the committer restarts it (``Store._restart_wal``) once the
checkpointer has copied them: passive checkpoints, run beside the writes, rarely leave every
frame copied just as the next write begins, which is when SQLite starts the WAL again from its
start, so under steady writes the WAL would only grow. The restart copies what the passive
passes left (the last moments' frames) and syncs, between two transactions when no batch is
queued; one a reader holds up is not waited for, and tried again after the next round."""

CHECKPOINT_PASSES = 8
"""Most checkpoints one round of the checkpointer runs (see ``_Checkpointer.round``)."""

WAL_MAX_BYTES = 64 * 2**20
"""Without a quota, a WAL file past this size is truncated by the committer itself, between two
transactions (``_trim_wal``): the checkpointer's rounds run beside the writes and may never find
the log still long enough to restart it, and the WAL would grow without end. A trigger, not a
cap: the file may pass it by a group and an aside, and by what is written while a reader on an
older snapshot keeps it from being truncated."""

MAX_RECENT_PER_PRINCIPAL = 1000
"""Answers to a principal's latest requests kept in memory, so a retry is answered without a
database read: a client retries what it had in flight when its connection dropped, a few at
most and a bridge's few hundred; one busy principal cannot push out the others' answers."""

MAX_RECENT_BYTES = 32 * 2**20
"""Memory the recent answers may take in all (their encoded bytes and ``RECENT_ENTRY_BYTES``
each): a command's answer is a few hundred bytes, so this keeps tens of thousands of the
latest; past it the oldest answers are read from the database again."""

RECENT_ENTRY_BYTES = 450
"""What one recent answer costs beyond its bytes: its key and value tuples, the strings of its
ids, and its places in the dict and the principal's deque (about 425 bytes with a UUID for
request id, measured with ``tracemalloc``)."""

EVENTS_MOVE_BYTES = 2**18
"""Bytes of event bodies appended to ``recent_events`` before they are moved into ``events``
together, in a transaction aside (``Store._write_aside``) once this many wait (about 1,000
events of a command's usual size): the more, the more commands of each combat one move takes
(its pages are rewritten once for all of them), and the longer that transaction takes, with
every command that arrives meanwhile waiting for it. When a move still ran in the transaction
of the commit that reached this many, a review measured such a commit at 45 to 60 ms with
2 MiB (12 to 17 of them the move's statement) against a 3 to 4 ms median, and at 2,000
commands/s offered the slowest answers doubled (50 to 62 ms against 17 to 33 before the
moves); at 256 KiB they were 18 to 38 ms, with the same commands/s in the closed loop. Under
a quota, at most 1/MOVE_WAL_SHARE of the WAL's share (see ``Store.open``)."""

MOVE_WAL_SHARE = 32
"""A move holds its events twice until it commits (in ``events`` and in the pages it frees of
``recent_events``) and writes them about twice over into the WAL: under a small quota, small
moves keep that out of the room for commands (at 1 MiB, a move every 8 KiB keeps as many
commands in it as before the moves, 107 of 1.5 KB; every 32 KiB, 99)."""

REQUEST_KEYS_EVERY = 4096
"""Remembered requests appended before they are indexed (``request_keys``) together, in a
transaction aside (``Store._write_aside``) once this many wait: the larger, the fewer of the
index's pages each key costs (each is written once per indexing, however many keys it takes),
and the longer the walk that finds a request among those not indexed yet (3 to 10 ms at this
size with 1.5 KB answers on a loaded machine, on the committer thread, only for a retry older
than the memory of recent answers or a rare false "maybe" of the filter), and the more pages
that one transaction writes."""

FILTER_BITS = 2**24
"""Size of the filter of stored request ids (2 MiB): with ``FILTER_PROBES`` it answers "maybe
stored" for a request id never stored about once in 500 at a million ids stored (about what
``MAX_REMEMBERED_REQUESTS`` lets ten principals keep), once in 50 at two million. A wrong
"maybe" costs one database read in a worker thread, never a wrong answer."""

FILTER_PROBES = 4
"""Bits one request id sets in the filter (``_Filter.add`` spells the four out)."""

_FILTER_MASK = FILTER_BITS - 1

FILTER_REBUILD_KEYS = 2_000_000
"""Request ids added to the filter before it is rebuilt from the database: the ids pruned since
it was built stay in it, and its wrong "maybe" grows with them. The rebuild runs in the
committer's thread before a transaction, about 1.5 µs per id stored (0.15 s per 100,000):
commits wait for it, once per this many commands."""

BUSY_TIMEOUT_MS = 5000
"""How long a connection waits for a lock another holds (an operator may run ``sqlite3`` on the
file; a checkpoint waits for the reader's statement to end): one transaction is far shorter."""

ErrorCode = Literal["store_failed", "store_full", "store_unavailable", "conflict", "combat_moved"]

log = structlog.get_logger("turnkeeper.store")

# ``bytes`` is not among the types the sqlite3 module binds without asking for an adapter
# (int, float, str and bytearray are): every blob (an event's row, a remembered answer, a
# summary) was looked up as ``PrepareProtocol.__adapt__``, which fails with a formatted
# ``AttributeError``, ~3,300 instructions each, four per command. Found as an adapter, it is
# itself (``bytes.__bytes__`` gives an exact bytes back as it is, a call without the argument
# parsing of ``bytes(b)``), bound as the same blob as before; a subclass is adapted as it was.
sqlite3.register_adapter(bytes, bytes.__bytes__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value NOT NULL
);
CREATE TABLE IF NOT EXISTS combats (
    combat_id TEXT PRIMARY KEY,
    ruleset TEXT NOT NULL,
    created_at REAL NOT NULL,
    -- The table the combat belongs to (``turnkeeper.tables``): written once, with the combat.
    table_id TEXT NOT NULL DEFAULT 'default'
);
CREATE TABLE IF NOT EXISTS events (
    combat_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (combat_id, seq)
) WITHOUT ROWID;
-- The latest events, appended in commit order and moved into ``events`` EVENTS_MOVE_BYTES at a
-- time, in key order. ``events`` keeps a combat's events together, so one command's events
-- land in the middle of its B-tree and rewrite two or three of its pages, for every combat of
-- a group commit (up to schema version 3); moved together, a combat's events of many commands
-- rewrite its pages once. Every read takes both tables; a clean stop moves them all.
CREATE TABLE IF NOT EXISTS recent_events (
    combat_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS recent_events_seq ON recent_events (combat_id, seq);
-- Appended in insertion order, with no index on the request id: a key a client chose lands
-- anywhere in such an index, so every command rewrote a page of it of its own, a third of the
-- pages of a group commit (up to schema version 3). ``request_keys`` indexes the rows later,
-- many at a time. AUTOINCREMENT: an id is never reused, even once every row is pruned, so the
-- rows after ``meta.requests_indexed`` are exactly those not indexed yet.
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    principal TEXT NOT NULL,
    request_id TEXT NOT NULL,
    combat_id TEXT NOT NULL,
    response BLOB NOT NULL,
    at REAL NOT NULL
);
-- The cap per principal walks its newest rows by this index; the age rule walks the table in
-- insertion (id) order, the batches' order, so an index on ``at`` alone would be one more
-- B-tree written per command for nothing (it was, up to schema version 2).
CREATE INDEX IF NOT EXISTS requests_principal_at ON requests (principal, at);
-- Where each request id's row is, for the rows up to ``meta.requests_indexed``: written
-- ``REQUEST_KEYS_EVERY`` rows at a time in key order, so one page of it is written once for
-- all the keys it takes, not once per key. The rows after it are found by a walk of the table's
-- end (``_REQUEST_ROW``).
CREATE TABLE IF NOT EXISTS request_keys (
    principal TEXT NOT NULL,
    request_id TEXT NOT NULL,
    row INTEGER NOT NULL,
    PRIMARY KEY (principal, request_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    combat_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL
);
-- What start-up needs of a combat before rebuilding it (its last seq, phase, next deadline),
-- written with every batch, so the daemon serves at once and rebuilds combats behind it.
-- WITHOUT ROWID: one B-tree written per command, where a rowid table and its key's index are
-- two, the row moved to a new rowid in both every time (up to schema version 2).
CREATE TABLE IF NOT EXISTS summaries (
    combat_id TEXT PRIMARY KEY,
    body BLOB NOT NULL
) WITHOUT ROWID;
"""


class StoreError(ProtocolError):
    """A store operation that did not happen. ``code`` is stable; ``message`` is for humans.

    ``conflict``: the batch does not fit the log (sequence taken or skipped, unknown or duplicate
    combat, request id already stored). ``store_full``: the disk or the configured size limit is
    full. ``store_unavailable``: a database server could not be reached (nothing is damaged;
    a commit's outcome may be unknown, its request id safe to retry). ``store_failed``: anything
    else (I/O error, unreadable record, store stopped).
    The message is a string-literal template with named arguments (like every error's).
    """

    def __init__(self, code: ErrorCode, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(code, template, field, **args)
        self.code: ErrorCode = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(slots=True)
class Batch:
    """One command's durable effect: its events, and the combat or request record it creates.
    Made once per command and never changed after (the committer's thread reads it): not
    frozen, for a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` and cost twice as much, once per command. The writer makes it by
    position (``_CombatLog.commit``): a field added or moved here must be added or moved there.

    ``events`` are plain events stored at ``first_seq``, ``first_seq + 1``, …; ``ruleset`` is set
    when the batch creates the combat; ``request`` is ``(principal, request_id)`` and ``response``
    the plain reply remembered for a retry; ``at`` is the daemon's clock when the command ran.
    """

    combat_id: str
    first_seq: int
    events: tuple[dict[str, Any], ...]
    ruleset: str | None
    request: tuple[str, str] | None
    response: Any
    at: float
    snapshot: Callable[[], Any] | None = None
    """When the caller takes a snapshot, what makes the combat's state after this batch into
    plain data: called in the committer's thread, so a large state never stalls the event loop
    (it must only read what it was given, e.g. ``partial(to_shared, state)`` of an immutable
    state). Written in the batch's transaction or, by the SQLite store, in a transaction of its
    own after the batch's answer (``Store._write_aside``): either way a kill leaves the previous
    snapshot or this one, never a part; one that fails to encode is logged and left out, and
    the batch commits without it. A batch
    of no events may carry one (of the state at ``first_seq - 1``, the end of the log): a
    rebuild that could not start from the stored snapshot leaves a fresh one for the next."""
    summary: Any = None
    """Plain data the caller wants back at start-up without replaying (see ``summaries``)."""
    table: str = DEFAULT_TABLE
    """The table of the batch's combat: stored when the batch creates it (with ``ruleset``;
    see ``memberships``), told with every commit on a shared store (``changes.notify``)."""
    epoch: int | None = None
    """On a store many daemons share: the epoch of this daemon's lease the combat's state was
    read under (``LoadedCombat.epoch``; ``FIRST_EPOCH`` for a combat made here). The batch is
    refused with ``combat_moved`` unless the daemon still holds the combat at that epoch: it
    was decided on a state another daemon may have moved past, had the lease gone away and
    come back meanwhile. None: whatever epoch the daemon holds it at. A store of one daemon's
    own ignores it."""
    rows: tuple[bytes, ...] | None = None
    """``events`` packed with msgpack already, one per event, when the caller packed them for
    its own use too: the store writes these bytes rather than packing the events again."""
    remembered: bytes | None = None
    """The reply remembered for a retry packed with msgpack already, likewise, in place of
    ``response`` (then None); with ``request`` only."""


@dataclass(frozen=True)
class LoadedCombat:
    """A combat as found at start-up: its snapshot (if any) and where its log ends.

    The events after the snapshot are read with ``replay``, a page at a time. ``warnings``
    name what was passed over while loading (an unreadable snapshot); the caller logs them.
    ``quarantined`` is the reason the combat cannot be trusted (a gap in its log); other
    combats load regardless.
    """

    combat_id: str
    ruleset: str
    created_at: float
    snapshot: tuple[int, Any] | None
    last: int
    """The last seq stored (0 for a combat without events)."""
    warnings: list[str] = field(default_factory=list)
    quarantined: str | None = None
    epoch: int | None = None
    """On a store many daemons share: the epoch of the lease this daemon held the combat at as
    it read it, for its batches (``Batch.epoch``). None on a store of one daemon's own."""


FIRST_EPOCH = 1
"""The epoch of a combat's first lease, its maker's from its first row, on a store many
daemons share."""


class _Outcome(asyncio.Future[None]):
    """Resolved by the committer once a batch's outcome is known, and deaf to cancellation: its
    waiter must learn whether its events are on disk, or its in-memory state would drift from
    the log. A task cancelled while it waits goes on waiting (``Task.cancel`` finds the future
    refusing) and is thrown the cancellation only once the outcome is known; ``Store.commit``
    catches it and asks for it again, for the task's next wait: the guarantee of a shielded
    scope, whoever cancelled, without a cancel scope entered and left per command."""

    def cancel(self, msg: Any = None) -> bool:
        return False


@dataclass(slots=True, eq=False)
class _Pending:
    """A batch on its way to disk, with the rows already encoded and the waiter's outcome.
    ``snapshot`` is the PostgreSQL store's, encoded in its committer's thread for the group's
    transaction; this store encodes snapshots later, in its transaction aside."""

    batch: Batch
    events: list[tuple[str, int, bytes]]
    response: bytes | None
    summary: bytes | None
    snapshot: bytes | None = None
    done: _Outcome = field(default_factory=_Outcome)
    """Resolved by the committer once the outcome is known (``error``). Made on the event
    loop (``commit``), whose future it is: the class itself is the factory, with no Python
    function around it to ask for the loop."""
    error: StoreError | None = None

    def settle(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _Recent:
    """The answers to the latest requests, newest kept: ``MAX_RECENT_PER_PRINCIPAL`` per
    principal and ``MAX_RECENT_BYTES`` in all. Used on the event loop only."""

    def __init__(self) -> None:
        self._answers: OrderedDict[tuple[str, str], tuple[str, bytes, float]] = OrderedDict()
        """(principal, request_id) → (combat id, encoded response, at), oldest first."""
        self._by_principal: dict[str, deque[str]] = {}
        """Each principal's request ids in ``_answers``, in the same order."""
        self._bytes = 0

    def get(self, principal: str, request_id: str) -> tuple[str, bytes, float] | None:
        return self._answers.get((principal, request_id))

    def add(
        self, principal: str, request_id: str, combat_id: str, response: bytes, at: float
    ) -> None:
        key = (principal, request_id)
        answers = self._answers
        if key in answers:
            return  # the store refuses a request id twice; nothing to remember again
        answers[key] = (combat_id, response, at)
        self._bytes += len(response) + RECENT_ENTRY_BYTES
        ids = self._by_principal.get(principal)
        if ids is None:
            # Not ``setdefault``: it would make a deque, and drop it, for every request.
            ids = self._by_principal[principal] = deque()
        ids.append(request_id)
        # Never more than the store keeps (see ``Store._prune``): memory must not answer for
        # a request the database has forgotten.
        if len(ids) > min(MAX_RECENT_PER_PRINCIPAL, MAX_REMEMBERED_REQUESTS):
            self._forget(principal, ids.popleft())
        while self._bytes > MAX_RECENT_BYTES:
            # The oldest of all is its principal's oldest too: both orders are insertion's.
            oldest, oldest_id = next(iter(self._answers))
            self._by_principal[oldest].popleft()
            self._forget(oldest, oldest_id)

    def _forget(self, principal: str, request_id: str) -> None:
        """Drop an answer whose id has left its principal's deque already."""
        _, response, _ = self._answers.pop((principal, request_id))
        self._bytes -= len(response) + RECENT_ENTRY_BYTES
        if not self._by_principal[principal]:
            del self._by_principal[principal]


class _Filter:
    """Every request id the database may hold, as a Bloom filter: ``maybe`` is False only for
    one never added. Its bits are set by the committer's thread alone and read on the event
    loop: a request id is added as its batch is checked, before its commit returns, so a lookup
    never misses it (one whose commit then fails stays, a wrong "maybe" like any other)."""

    def __init__(self) -> None:
        self._bits = bytearray(FILTER_BITS // 8)
        self._added = 0
        self._built_with = 0
        """Request ids the filter was built with: those stored then, some pruned since."""

    def built(self) -> None:
        """Mark the ids added so far as those the database held when the filter was built."""
        self._built_with = self._added

    @property
    def worn(self) -> bool:
        """Whether ``FILTER_REBUILD_KEYS`` ids were added since it was built: time to build it
        again from the database, without the ids pruned since."""
        return self._added - self._built_with > FILTER_REBUILD_KEYS

    # The probes: double hashing over one 64-bit hash (``hash`` is salted per process, and so
    # is the filter, built anew by each), inline in both methods, since both run once per
    # command: ``maybe`` walks its ``FILTER_PROBES``, ``add`` spells out the same four (a
    # change of ``FILTER_PROBES`` is a change of both).

    def add(self, request: tuple[str, str]) -> bool:
        """Add the request id (principal, request id); whether the filter had it already (then
        it may be stored). The pair as the batch holds it: its hash is that of the same pair
        made anew (``maybe``'s), with no tuple made and unpacked per command."""
        bits = self._bits
        h = hash(request)
        # The step masked as well (the same probes as ``maybe``'s): every sum below is of
        # one-digit ints. The probes spelled out, each byte read once: 9,500 instructions
        # where a walk of ``range(FILTER_PROBES)`` took 11,800, once per command.
        first, step = h & _FILTER_MASK, ((h >> 32) | 1) & _FILTER_MASK
        had = True
        for at in (
            first,
            (first + step) & _FILTER_MASK,
            (first + 2 * step) & _FILTER_MASK,
            (first + 3 * step) & _FILTER_MASK,
        ):
            byte = at >> 3
            old = bits[byte]
            new = old | (1 << (at & 7))
            if new != old:
                had = False
                bits[byte] = new
        self._added += 1
        return had

    def maybe(self, principal: str, request_id: str) -> bool:
        bits = self._bits
        h = hash((principal, request_id))
        at, step = h & _FILTER_MASK, (h >> 32) | 1
        for _ in range(FILTER_PROBES):
            if not bits[at >> 3] & (1 << (at & 7)):
                return False
            at = (at + step) & _FILTER_MASK
        return True


_T = TypeVar("_T")


class _CommitterThread:
    """The one thread the committer's writes run in, started with its first job and ended by
    ``close``. A job is handed over under a condition and its outcome comes back through
    ``call_soon_threadsafe``: a third of the CPU of ``anyio.to_thread.run_sync``'s round
    trip (its limiter, cancel scope and worker pool), paid once per transaction."""

    def __init__(self) -> None:
        self._jobs: deque[Callable[[], None] | None] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._ending: threading.Thread | None = None
        """A closed thread that may still be running its last job."""

    async def run(self, work: Callable[[], _T]) -> _T:
        """``work()``'s result (or exception) once it has run in the thread. The job runs to its
        end whatever becomes of the wait: callers shield the wait, so that what reached the disk
        is reported."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_T] = loop.create_future()

        def job() -> None:
            try:
                result: Any = work()
                error: BaseException | None = None
            except BaseException as e:  # handed to the waiter, whatever it is
                result, error = None, e
            # A loop closed meanwhile has no waiter left to tell; the thread must live on for
            # the next job (or ``close``), not die here and leave later jobs waiting forever.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, done, result, error)

        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="turnkeeper-committer", daemon=True
                )
                self._thread.start()
            self._jobs.append(job)
            self._ready.notify()
        return await done

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                job = self._jobs.popleft()
            if job is None:
                return
            job()

    def close(self) -> None:
        """End the thread once the job it runs (if any) is over; never waits for it."""
        with self._ready:
            if self._thread is not None:
                self._jobs.append(None)
                self._ready.notify()
                self._ending, self._thread = self._thread, None

    def join(self) -> None:
        """Wait for a closed thread's last job: the connection it writes with is closed next."""
        if self._ending is not None:
            self._ending.join()
            self._ending = None


class _Checkpointer:
    """Copies the WAL into the database (``PRAGMA wal_checkpoint(PASSIVE)``) from a thread and a
    connection of its own, woken by the committer after a commit, at most every
    ``CHECKPOINT_SECONDS``: the writer's own checkpoints are off (``wal_autocheckpoint=0``), so
    no ``COMMIT`` waits for one. A passive checkpoint never waits for the writer nor blocks it.
    A round repeats until it finds nothing new to copy: frames committed while it copied would
    otherwise stay, and the writer restarts the WAL from its start only once every frame is in
    the database. A failed round is logged and left: the next one copies what it did not."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._wake = threading.Event()
        self.lock = threading.Lock()
        """Held by each checkpoint: ``Store._trim_wal`` takes it too, so that its checkpoint
        waits for one of these to end rather than fail on SQLite's busy timeout."""
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        """Passive checkpoints run so far."""
        self.caught_up = False
        """Set when a round copied every frame of a WAL longer than ``WAL_RESTART_BYTES``:
        the committer restarts it (``Store._restart_wal``) when no batch is queued."""
        (self._page_size,) = connection.execute("PRAGMA page_size").fetchone()

    def nudge(self) -> None:
        """Ask for a round (committer's thread, after a commit); starts the thread at first."""
        if self._thread is None and not self._closing.is_set():
            self._thread = threading.Thread(
                target=self._serve, name="turnkeeper-checkpointer", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def _serve(self) -> None:
        last = 0.0
        while True:
            self._wake.wait()
            # The commits while it waits are copied in the same round.
            if self._closing.wait(max(0.0, last + CHECKPOINT_SECONDS - time.monotonic())):
                return
            self._wake.clear()
            last = time.monotonic()
            self.round()

    def round(self) -> None:
        """Copy what the WAL holds into the database, until a pass finds nothing new (at most
        CHECKPOINT_PASSES passes: under writes that never pause, the next round goes on)."""
        seen = None
        try:
            for _ in range(CHECKPOINT_PASSES):
                with self.lock:
                    busy, frames, copied = self._connection.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)"
                    ).fetchone()
                self.passes += 1
                if busy or (frames, copied) == seen or frames <= 0 or copied < frames:
                    break  # the same as the last pass (nothing new), or a reader holds frames
                seen = (frames, copied)
            if not busy and copied == frames and frames * self._page_size >= WAL_RESTART_BYTES:
                self.caught_up = True
        except sqlite3.Error:
            log.warning("wal_checkpoint_failed", exc_info=True)

    def close(self) -> None:
        """End the thread (after the round it runs, if any) and close its connection."""
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._connection.close()


def _wake(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


class _ConflictError(Exception):
    """A batch that does not fit the log; rolled back alone, the rest of its group commits."""


_BODY = operator.itemgetter(2)
"""An event row's body (``_Pending.events``)."""


def _pack(value: Any) -> bytes:
    body: bytes = msgpack.packb(value, use_bin_type=True)
    return body


def _unpack(body: object) -> Any:
    """Decode a stored body, or raise ``ValueError`` if it is not one we wrote."""
    if not isinstance(body, bytes):
        raise ValueError(f"body is {type(body).__name__}, not bytes")
    try:
        return msgpack.unpackb(body, raw=False)
    # msgpack's truncation, format, depth and trailing-data errors; TypeError for unhashable keys.
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise ValueError(str(e) or type(e).__name__) from e


def _unpack_event(body: object) -> dict[str, Any]:
    event = _unpack(body)
    if not isinstance(event, dict):
        raise ValueError(f"event body is {type(event).__name__}, not a map")
    return event


def _conflict(reason: str) -> StoreError:
    """A batch that does not fit the log, with the same words whichever check found it."""
    return StoreError("conflict", "{reason}", reason=reason)


def _request_taken(request: tuple[str, str]) -> str:
    """Why a batch whose request id is stored already is refused."""
    principal, request_id = request
    return f"request id {request_id!r} of {principal!r} is stored already"


def _error(e: sqlite3.Error) -> StoreError:
    if isinstance(e, sqlite3.IntegrityError):
        return StoreError("conflict", "{reason}", reason=str(e))
    if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StoreError("store_full", "{reason}", reason=str(e))
    return StoreError("store_failed", "{reason}", reason=str(e))


def _lock(data_dir: Path) -> int:
    """Take the data directory's lock (see ``exclusive_lock``), or raise ``StoreError`` naming
    the directory and the holder's pid."""
    path = data_dir / LOCK_FILE
    try:
        return exclusive_lock(path)
    except LockHeldError as e:
        raise StoreError(
            "store_failed",
            "the data directory {path} is in use by another turnkeeper daemon (pid {pid})",
            path=str(data_dir),
            pid=e.holder,
        ) from None
    except OSError as e:
        raise StoreError(
            "store_failed", "cannot lock {path}: {reason}", path=str(path), reason=str(e)
        ) from e


def _warn_if_full(
    db: sqlite3.Connection, path: Path, share: int, quota: int, page_size: int
) -> None:
    """Log a warning if the database already fills its share of the quota (``share`` pages).

    SQLite keeps a database larger than ``max_page_count`` as it is, so every commit would fail
    with ``store_full`` from the start: the case of an upgrade from a daemon whose quota was the
    database's alone, now that the WAL takes 1/WAL_SHARE of it."""
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    if pages < share:
        return
    mib = 2**20
    # The smallest quota (in whole MiB) whose database share is larger than the database now.
    needed = (pages + 1) * page_size * WAL_SHARE // (WAL_SHARE - 1) // mib + 1
    log.warning(
        "store_over_quota",
        path=str(path),
        database_mib=round(pages * page_size / mib, 2),
        database_share_mib=round(share * page_size / mib, 2),
        quota_mib=round(quota * page_size / mib, 2),
        advice=(
            f"every command will fail with store_full: the database may take"
            f" {WAL_SHARE - 1}/{WAL_SHARE} of --max-db-mib and its write-ahead log the rest;"
            f" raise --max-db-mib to at least {needed}"
        ),
    )


_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Tables: every combat stored before them is the default table's.
    1: ("ALTER TABLE combats ADD COLUMN table_id TEXT NOT NULL DEFAULT 'default'",),
    # Fewer B-trees written per command: no index on ``requests.at`` (the age prune walks the
    # rowid order), and summaries in a table without rowid.
    2: (
        "DROP INDEX IF EXISTS requests_at",
        "CREATE TABLE summaries_3 (combat_id TEXT PRIMARY KEY, body BLOB NOT NULL) WITHOUT ROWID",
        "INSERT INTO summaries_3 (combat_id, body) SELECT combat_id, body FROM summaries",
        "DROP TABLE summaries",
        "ALTER TABLE summaries_3 RENAME TO summaries",
    ),
    # Requests appended with no index on their id, indexed later many at a time: the rows
    # keep their rowids (their insertion order, which the age prune walks) and are all indexed.
    # Events appended to a table of their own, moved into ``events`` many at a time.
    3: (
        "CREATE TABLE requests_4 (id INTEGER PRIMARY KEY AUTOINCREMENT, principal TEXT NOT NULL,"
        " request_id TEXT NOT NULL, combat_id TEXT NOT NULL, response BLOB NOT NULL,"
        " at REAL NOT NULL)",
        "INSERT INTO requests_4 (id, principal, request_id, combat_id, response, at)"
        " SELECT rowid, principal, request_id, combat_id, response, at FROM requests"
        " ORDER BY rowid",
        "DROP TABLE requests",
        "ALTER TABLE requests_4 RENAME TO requests",
        "CREATE INDEX requests_principal_at ON requests (principal, at)",
        "CREATE TABLE request_keys (principal TEXT NOT NULL, request_id TEXT NOT NULL,"
        " row INTEGER NOT NULL, PRIMARY KEY (principal, request_id)) WITHOUT ROWID",
        "INSERT INTO request_keys (principal, request_id, row)"
        " SELECT principal, request_id, id FROM requests ORDER BY principal, request_id",
        "INSERT INTO meta (key, value)"
        " SELECT 'requests_indexed', coalesce(max(id), 0) FROM requests",
        "CREATE TABLE recent_events (combat_id TEXT NOT NULL, seq INTEGER NOT NULL,"
        " body BLOB NOT NULL)",
        "CREATE UNIQUE INDEX recent_events_seq ON recent_events (combat_id, seq)",
    ),
}
"""The statements that take a database from each older version to the next one."""


_EVENTS_AFTER = (
    # Both tables' events in one order, merged as read (each side walks its index in seq
    # order, so a page of a long log reads only its page's rows).
    "SELECT seq, body FROM events WHERE combat_id = ?1 AND seq > ?2"
    " UNION ALL SELECT seq, body FROM recent_events WHERE combat_id = ?1 AND seq > ?2"
    " ORDER BY 1 LIMIT ?3"
)
"""A combat's events after a seq, at most a number of them, by (combat id, seq, limit)."""

_LAST_SEQ = (
    "SELECT max(coalesce((SELECT max(seq) FROM events WHERE combat_id = ?1), 0),"
    " coalesce((SELECT max(seq) FROM recent_events WHERE combat_id = ?1), 0))"
)
"""A combat's last seq stored (0 for none), by combat id."""

_REQUEST_ROW = (
    # Its row by the index, checked to be its own (an indexed row pruned, its key with it, never
    # answers for another), or else among the rows not indexed yet: a walk of the table's end,
    # by id (the ``+`` keeps the planner from walking the principal's index instead). One
    # statement, so the indexing of a commit in between cannot hide a row from both halves.
    "SELECT combat_id, response, at FROM requests"
    " WHERE id = (SELECT row FROM request_keys WHERE principal = ?1 AND request_id = ?2)"
    " AND principal = ?1 AND request_id = ?2"
    " UNION ALL"
    " SELECT combat_id, response, at FROM requests"
    " WHERE id > (SELECT value FROM meta WHERE key = 'requests_indexed')"
    " AND +principal = ?1 AND request_id = ?2"
    " LIMIT 1"
)
"""A remembered request's combat id, response and time by (principal, request id)."""


class _Inserts:
    """One table's ``INSERT`` of a group's rows, many rows per statement: a statement of the
    largest power of two of rows left, at most ``ROWS_PER_INSERT``, then the next (48 rows go
    in 32 and 16). A handful of statement texts per table, each prepared once (the sqlite3
    module's cache keeps them), carry any number of rows."""

    def __init__(self, head: str, width: int) -> None:
        row = "(" + ", ".join("?" * width) + ")"
        self._statements: dict[int, str] = {}
        size = 1
        while size <= ROWS_PER_INSERT:
            self._statements[size] = f"{head} VALUES {', '.join([row] * size)}"
            size *= 2

    def run(self, db: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        start, left = 0, len(rows)
        while left:
            size = min(ROWS_PER_INSERT, 1 << (left.bit_length() - 1))
            values = list(itertools.chain.from_iterable(rows[start : start + size]))
            db.execute(self._statements[size], values)
            start += size
            left -= size


_INSERT_EVENTS = _Inserts("INSERT INTO recent_events (combat_id, seq, body)", 3)
_INSERT_REQUESTS = _Inserts(
    "INSERT INTO requests (principal, request_id, combat_id, response, at)", 5
)
_INSERT_SUMMARIES = _Inserts("INSERT OR REPLACE INTO summaries (combat_id, body)", 2)


def _migrate(db: sqlite3.Connection) -> None:
    """Upgrade a database of an older version in place, all its steps in one transaction (a
    kill midway leaves the old version whole). Any other version is left for ``open`` to
    refuse."""
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if found is None:
        return  # a new database
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or row[0] not in _MIGRATIONS:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for version in range(row[0], SCHEMA_VERSION):
            for statement in _MIGRATIONS[version]:
                db.execute(statement)
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    log.info(
        "store_migrated",
        path=str(db.execute("PRAGMA database_list").fetchone()[2]),
        schema_from=row[0],
        schema_to=SCHEMA_VERSION,
    )


def claim_data_dir(data_dir: Path) -> int:
    """The data directory made or checked private and locked, for this process alone (every
    store: the token file lives there too); the lock's descriptor. Raises ``UnsafePathError``
    if others may write in it, ``StoreError`` if it cannot be made or another daemon holds it."""
    try:
        private_directory(data_dir, "data directory", _ours)
    except OSError as e:
        raise StoreError(
            "store_failed",
            "cannot open the store in {path}: {reason}",
            path=str(data_dir),
            reason=str(e),
        ) from e
    return _lock(data_dir)


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE … COMMIT), never implicit.
    # check_same_thread=False: the committer's connection is used in the committer's thread and
    # opened and closed in another; the read connection may be opened on another thread than it
    # is used.
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


class Store:
    """Every combat's event log, remembered requests and snapshots, in ``<data_dir>/turnkeeper.db``.

    Lifecycle: ``Store.open`` → ``await task_group.start(store.run)`` → start-up recovery
    (``summaries``, then ``load_one`` and ``replay`` per combat, rebuilds storing fresh
    snapshots through ``commit``) → ``commit`` and ``lookup_request`` from any task →
    ``await stop()`` (once the queue is committed) → ``close``.
    """

    transactions: int
    """Write transactions run so far (group commit makes this smaller than batches committed)."""

    def __init__(
        self,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        loader: sqlite3.Connection,
        checkpoints: sqlite3.Connection,
        lock: int,
        wal_limit: int | None,
    ) -> None:
        self._lock = lock  # the data directory's lock: held until close
        self._wal = Path(writer.execute("PRAGMA database_list").fetchone()[2] + "-wal")
        self._wal_limit = wal_limit  # bytes the WAL may take under a quota; None without one
        self._writer = writer  # touched only by the committer, inside its thread
        self._reader = reader  # the event loop's: short statements, each on a fresh snapshot
        # Rebuilds read on their own connection, from worker threads: a statement of theirs on
        # the loop's connection would pin what the loop's reads see to its start.
        self._loader = loader
        self._loading = threading.Lock()
        self._checkpointer = _Checkpointer(checkpoints)
        # The batches waiting for the committer (at most COMMIT_QUEUE), on the event loop: a
        # deque and a future to wake each side, since every command passes here.
        self._queue: deque[_Pending] = deque()
        self._closed = False
        self._arrived: asyncio.Future[None] | None = None
        """What the committer waits on while the queue holds fewer than ``_wanted`` batches."""
        self._wanted = 1
        """Queued batches at which ``commit`` wakes the committer: one when it waits on an empty
        queue, ``GATHER_BATCHES`` while it gathers a group (``_gather``)."""
        self._room: deque[asyncio.Future[bool]] = deque()
        """Committers of a full queue waiting for room, first come first served: each is woken
        with True once handed a slot (``_make_room``), False when the store stops."""
        self._handed = 0
        """Slots of the queue handed to woken committers that have not taken them yet: a
        newcomer waits behind them, even runnable before they wake, to keep arrival order."""
        self.transactions = 0
        # Requests each principal wrote since the last prune (only they can have gone over the
        # cap), and at least how many rows each had before them (committer's thread): one far
        # under the cap is not walked at every prune to learn that it is (``_prune``).
        self._added: dict[str, int] = {}
        self._bounds: dict[str, int] = {}
        self._latest_at = 0.0
        # The last seq of each combat the committer has written or looked up (0 for none yet),
        # so a batch is checked against the log without a query: one entry per combat, bounded
        # like the daemon's combats. The committer is the log's only writer (the lock).
        self._last: dict[str, int] = {}
        # Remembered requests appended since the last indexing (``_index_requests``), counted
        # from the database at the first transaction (committer's thread).
        self._unindexed: int | None = None
        # Bytes of the events in ``recent_events``, counted likewise (``_move_events``), and
        # how many make a move.
        self._unmoved: int | None = None
        # The snapshots of batches committed, by combat, waiting for ``_write_aside``: the
        # log's end each is of, and what makes it (committer's thread).
        self._held: dict[str, tuple[int, Callable[[], Any]]] = {}
        # ``transactions`` when ``_write_aside`` last failed (a full disk, say): not tried
        # again before the next group commits.
        self._aside_failed = -1
        # Set by a commit that left the WAL over its bound (``_trim_wal``).
        self._trim_due = False
        self._move_bytes = (
            EVENTS_MOVE_BYTES
            if wal_limit is None
            else min(EVENTS_MOVE_BYTES, wal_limit // MOVE_WAL_SHARE)
        )
        self._recent = _Recent()
        # Every request id stored, built by the committer's thread before its first
        # transaction; until then a request id not in ``_recent`` is looked up in the database.
        self._filter: _Filter | None = None
        self._stopped: anyio.Event | None = None  # made by run(): events belong to its loop
        # The event loop's own packer for the rows of ``commit`` (a packer is not for two
        # threads at once): reused, it packs a row in half the time ``msgpack.packb`` takes.
        self._packer = msgpack.Packer(use_bin_type=True)
        self._committer = _CommitterThread()

    @classmethod
    def open(cls, data_dir: Path, *, max_pages: int | None = None) -> Store:
        """Open (creating if missing) the store in ``data_dir``, for this process alone.

        The directory is created private, or refused if others may write in it
        (``UnsafePathError``, see ``turnkeeper.private``); the database and its WAL and
        shared-memory files are 0600. ``max_pages`` is an operator's quota on
        the database and its WAL together, in pages: the database may take all but
        1/WAL_SHARE of it (``PRAGMA max_page_count``), the WAL the rest (see ``_trim_wal``).
        Past it every commit fails with ``store_full``, exactly as on a full disk, which is
        also how the tests make the disk full. Raises ``StoreError("store_failed")`` if
        another daemon holds the directory (the message names its pid), or the
        file cannot be opened or was written by another schema version.
        """
        lock = claim_data_dir(data_dir)
        try:
            path = data_dir / DB_FILE
            private_file(path, "database", create=True)
            for companion in ("-wal", "-shm"):
                private_file(data_dir / (DB_FILE + companion), "database", create=False)
            writer = _connect(path)
            try:
                mode = writer.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode != "wal":
                    raise StoreError(
                        "store_failed",
                        "{path}: journal mode {mode}, WAL refused",
                        path=str(path),
                        mode=str(mode),
                    )
                writer.execute("PRAGMA synchronous=FULL")
                _migrate(writer)
                writer.executescript(_SCHEMA)
                writer.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (SCHEMA_VERSION,),
                )
                (version,) = writer.execute(
                    "SELECT value FROM meta WHERE key = 'schema_version'"
                ).fetchone()
                if version != SCHEMA_VERSION:
                    raise StoreError(
                        "store_failed",
                        "{path}: schema version {version}, this daemon reads {expected}",
                        path=str(path),
                        version=str(version),
                        expected=SCHEMA_VERSION,
                    )
                writer.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('requests_indexed', 0)"
                )
                writer.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                # The checkpointer's thread copies the WAL, never a COMMIT (``_Checkpointer``).
                writer.execute("PRAGMA wal_autocheckpoint=0")
                wal_limit = None
                if max_pages is not None:
                    wal_pages = max(1, max_pages // WAL_SHARE)
                    writer.execute(f"PRAGMA max_page_count={int(max_pages - wal_pages)}")
                    (page_size,) = writer.execute("PRAGMA page_size").fetchone()
                    wal_limit = wal_pages * page_size
                    _warn_if_full(writer, path, max_pages - wal_pages, max_pages, page_size)
                reader = _connect(path)
                loader = _connect(path)
                checkpoints = _connect(path)
                for connection in (reader, loader):
                    connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            except BaseException:
                writer.close()
                raise
        except (OSError, sqlite3.Error) as e:
            os.close(lock)
            raise StoreError(
                "store_failed",
                "cannot open the store in {path}: {reason}",
                path=str(data_dir),
                reason=str(e),
            ) from e
        except BaseException:
            os.close(lock)
            raise
        return cls(writer, reader, loader, checkpoints, lock, wal_limit)

    def close(self) -> None:
        """Close the database. Call after ``run`` has returned (or was never started)."""
        self._committer.close()
        self._committer.join()
        self._closed = True
        self._checkpointer.close()
        self._reader.close()
        self._loader.close()
        self._writer.close()
        os.close(self._lock)

    # -- writing ---------------------------------------------------------------------------------

    async def commit(self, batch: Batch) -> None:
        """Make ``batch`` durable; return only once it is committed.

        Raises ``StoreError``: ``conflict`` if the batch does not fit the log (only this batch is
        refused), ``store_full`` or ``store_failed`` if its transaction failed (nothing of it is
        kept), ``store_failed`` if the store is stopping. Once queued, the wait is shielded from
        cancellation: the caller must learn whether its events are on disk, or its in-memory
        state would drift from the log; a cancellation meanwhile lands at its next wait. Plain
        data that msgpack cannot encode raises ``TypeError`` here, before it can spoil anyone
        else's transaction.
        """
        pack = self._packer.pack
        rows = tuple(map(pack, batch.events)) if batch.rows is None else batch.rows
        response = batch.remembered
        if response is None and batch.request is not None:
            response = pack(batch.response)
        pending = _Pending(
            batch,
            # ``zip``, not a comprehension: no frame of its own per command.
            list(zip(itertools.repeat(batch.combat_id), itertools.count(batch.first_seq), rows)),
            response,
            None if batch.summary is None else pack(batch.summary),
        )
        queue = self._queue
        if (len(queue) >= COMMIT_QUEUE or self._room or self._handed) and not self._closed:
            await self._wait_room()
        if self._closed:
            raise StoreError("store_failed", "the store is stopping")
        queue.append(pending)
        if self._room:
            self._make_room()  # what room is left goes to those behind, in their order
        arrived = self._arrived
        if arrived is not None and len(queue) >= self._wanted and not arrived.done():
            arrived.set_result(None)
        try:
            await pending.done
        except asyncio.CancelledError as cancelled:
            if not pending.done.done() or pending.done.cancelled():
                raise  # never so: the future refuses cancellation, and is always settled
            # Cancelled while it waited (``_Outcome``): the caller learns the outcome first,
            # and the cancellation is asked for again, to land at the task's next wait, as
            # after a shielded scope. A cancel scope would ask again by itself, but a plain
            # ``Task.cancel`` (``asyncio.timeout``'s too) asks once: it would be lost. Asked
            # again in place of the one caught, so the task's count of cancellations is the
            # same (``asyncio.timeout`` tells its own from it), and with its message.
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            task.cancel(*cancelled.args)
        if pending.error is not None:
            raise pending.error

    async def _wait_room(self) -> None:
        """Wait behind the committers already waiting until ``_make_room`` hands this one a
        slot of the queue (or the store stops): in arrival order, so none waits for ever while
        newcomers keep a full queue full."""
        room: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._room.append(room)
        try:
            await room
        except BaseException:
            if room.done() and not room.cancelled() and room.result():
                # Cancelled once handed a slot: the slot goes to the next in line.
                self._handed -= 1
                self._make_room()
            elif room in self._room:
                self._room.remove(room)
            raise
        if room.result():
            self._handed -= 1  # taken by the caller, before it next waits

    def _make_room(self) -> None:
        """Hand the queue's free slots to the committers waiting for room, first come first."""
        free = COMMIT_QUEUE - len(self._queue) - self._handed
        while free > 0 and self._room:
            room = self._room.popleft()
            if not room.done():  # one cancelled is gone, its slot left for the next
                room.set_result(True)
                self._handed += 1
                free -= 1

    async def stop(self) -> None:
        """Accept no more commits, and return once ``run`` has committed everything queued."""
        self._close_queue()
        if self._stopped is not None:
            await self._stopped.wait()

    def _close_queue(self) -> None:
        self._closed = True
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)
        while self._room:
            room = self._room.popleft()
            if not room.done():
                room.set_result(False)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The committer: write queued batches, many per transaction, until ``stop``.

        Start it with ``task_group.start(store.run)``. If it is cancelled instead, the transaction
        in flight still finishes and is reported; batches still queued fail with ``store_failed``.
        """
        self._stopped = stopped = anyio.Event()
        task_status.started()
        queue = self._queue
        # Whether a group's transaction just ended, leaving batches queued that may gather more.
        gather = False
        try:
            while True:
                # Once per transaction: a committer cancelled before it starts writes nothing.
                await anyio.lowlevel.checkpoint_if_cancelled()
                if not queue:
                    gather = False  # a lone client's next command is written as it comes
                    if self._closed:
                        with anyio.CancelScope(shield=True):
                            # Until all are written, or a try fails (it drops what it took).
                            while self._held and self._aside_failed != self.transactions:
                                await self._committer.run(self._write_aside)
                            if self._unmoved:
                                # A stopped store leaves its events in ``events`` alone.
                                await self._committer.run(self._move_all)
                        break
                    if self._checkpointer.caught_up:
                        with anyio.CancelScope(shield=True):
                            await self._committer.run(self._restart_wal)
                        continue
                    if self._aside_due(idle=True):
                        with anyio.CancelScope(shield=True):
                            await self._committer.run(self._write_aside)
                        continue
                    self._arrived = asyncio.get_running_loop().create_future()
                    try:
                        await self._arrived
                    finally:
                        self._arrived = None
                    continue
                if gather and len(queue) < GATHER_BATCHES and not self._closed:
                    gather = False
                    await self._gather()
                    continue
                take = min(len(queue), MAX_BATCHES_PER_COMMIT)
                group = [queue.popleft() for _ in range(take)]
                self._make_room()
                try:
                    # Shielded: a write that reached the disk must be reported to its waiters.
                    with anyio.CancelScope(shield=True):
                        await self._committer.run(partial(self._write, group))
                    self._remember(group)
                except BaseException:
                    # A committer that crashes still answers the batches it took (their waits
                    # are shielded): with an error, since it cannot say what reached the disk.
                    for pending in group:
                        pending.error = StoreError("store_failed", "the committer crashed")
                    raise
                finally:
                    for pending in group:
                        pending.settle()
                # The group's answers are out: what queued meanwhile may gather a larger group.
                gather = True
                if self._trim_due:
                    with anyio.CancelScope(shield=True):
                        await self._committer.run(self._trim_wal)
                if self.transactions % PRUNE_EVERY_COMMITS == 0:
                    with anyio.CancelScope(shield=True):
                        await self._committer.run(self._prune)
                if self._aside_due(idle=False):
                    with anyio.CancelScope(shield=True):
                        await self._committer.run(self._write_aside)
        finally:
            self._committer.close()
            self._close_queue()
            while queue:
                pending = queue.popleft()
                pending.error = StoreError("store_failed", "the store stopped before this commit")
                pending.settle()
            stopped.set()

    async def _gather(self) -> None:
        """Wait until ``GATHER_BATCHES`` are queued, the store stops, or ``GATHER_SECONDS`` pass:
        called with a few batches queued just after a transaction, so the next one carries more
        of them (``GATHER_BATCHES``). The batches already queued wait at most the bound."""
        loop = asyncio.get_running_loop()
        self._arrived = arrived = loop.create_future()
        self._wanted = GATHER_BATCHES
        timer = loop.call_later(GATHER_SECONDS, _wake, arrived)
        try:
            await arrived
        finally:
            timer.cancel()
            self._arrived = None
            self._wanted = 1

    def _write(self, group: Sequence[_Pending]) -> None:
        """One transaction for the whole group (committer's thread): a few statements per table
        (``_Inserts``) for every batch that fits the log, those that do not refused alone. Should
        the database refuse a row the checks before the transaction let through, it is rolled
        back and the group written again, each batch in its own savepoint."""
        db = self._writer
        self.transactions += 1
        if not self._wal_has_room():
            full = StoreError(
                "store_full",
                "the write-ahead log {path} cannot be checkpointed within the quota",
                path=str(self._wal),
            )
            for pending in group:
                pending.error = full
            return
        if self._filter is None or self._filter.worn:
            self._filter = self._build_filter()
        unindexed = self._unindexed
        if unindexed is None:
            (unindexed,) = db.execute(
                "SELECT count(*) FROM requests"
                " WHERE id > (SELECT value FROM meta WHERE key = 'requests_indexed')"
            ).fetchone()
        unmoved = self._unmoved
        if unmoved is None:
            (unmoved,) = db.execute(
                "SELECT coalesce(sum(length(body)), 0) FROM recent_events"
            ).fetchone()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._write_together(group)
            except sqlite3.IntegrityError:
                db.execute("ROLLBACK")
                db.execute("BEGIN IMMEDIATE")
                for pending in group:
                    pending.error = None
                    db.execute("SAVEPOINT batch")
                    try:
                        self._write_batch(pending)
                    except (_ConflictError, sqlite3.IntegrityError) as e:
                        db.execute("ROLLBACK TO batch")
                        pending.error = _conflict(str(e))
                    db.execute("RELEASE batch")
            db.execute("COMMIT")
        except sqlite3.Error as e:
            # SQLite may already have rolled back (it does on a full disk); never keep a part.
            if db.in_transaction:
                db.execute("ROLLBACK")
            error = _error(e)
            for pending in group:
                pending.error = error
            self._unindexed, self._unmoved = unindexed, unmoved
            return
        bound = WAL_MAX_BYTES if self._wal_limit is None else self._wal_limit // 2
        if self._wal_size() > bound:
            self._trim_due = True  # once the group's answers are out, before the next group
        else:
            self._checkpointer.nudge()
        # The events written, their bodies' bytes summed once for the group: a sum over a
        # generator per batch cost 2,000 instructions a command.
        written: list[tuple[str, int, bytes]] = []
        last, added, latest = self._last, self._added, self._latest_at
        for pending in group:
            if pending.error is None:
                b = pending.batch
                if b.at > latest:
                    latest = b.at
                events = pending.events
                if events:
                    last[b.combat_id] = b.first_seq + len(events) - 1
                    written += events
                if b.request is not None:
                    unindexed += 1
                    principal = b.request[0]
                    added[principal] = added.get(principal, 0) + 1
                if b.snapshot is not None:
                    # The log's end after this batch; a later one of the combat replaces it.
                    self._held[b.combat_id] = (b.first_seq + len(events) - 1, b.snapshot)
        self._latest_at = latest
        unmoved += sum(map(len, map(_BODY, written)))
        self._unindexed, self._unmoved = unindexed, unmoved

    def _wal_has_room(self) -> bool:
        """Whether a transaction may start under the quota (committer's thread): a WAL over half
        its share is checkpointed first (the last try failed), and if it still is, a transaction
        now could take it past its share."""
        if self._wal_limit is None or self._wal_size() <= self._wal_limit // 2:
            return True
        self._trim_wal()
        return self._wal_size() <= self._wal_limit // 2

    def _aside_due(self, *, idle: bool) -> bool:
        """Whether ``_write_aside`` has work (``idle``: the queue is empty) or must run even
        before the queued batches (event loop, between the committer's jobs)."""
        if self._aside_failed == self.transactions:
            return False  # tried again after the next group's transaction, not in a spin
        held = len(self._held)
        unmoved = self._unmoved or 0
        unindexed = self._unindexed or 0
        if idle:
            return bool(held) or unmoved >= self._move_bytes or unindexed >= REQUEST_KEYS_EVERY
        return (
            held >= ASIDE_OVERDUE * ASIDE_SNAPSHOTS
            or unmoved >= ASIDE_OVERDUE * self._move_bytes
            or unindexed >= ASIDE_OVERDUE * REQUEST_KEYS_EVERY
        )

    def _write_aside(self) -> None:
        """What no command's answer waits for, in a transaction of its own (committer's thread,
        once the answers of the last group are settled, when no batch is queued or when it is
        overdue): the held snapshots ``ASIDE_SNAPSHOT_SECONDS`` encode here; the indexing of
        remembered requests; the move of the recent events. A kill before it commits leaves
        each combat's previous snapshot, and the events and requests where they were. One that
        fails is logged and dropped (its snapshots with it: a snapshot only shortens a start's
        replay); its moves and indexing are tried again."""
        db = self._writer
        if not self._wal_has_room():
            self._aside_failed = self.transactions
            return
        rows: list[tuple[str, int, bytes]] = []
        until = time.perf_counter() + ASIDE_SNAPSHOT_SECONDS
        for n, combat_id in enumerate(list(self._held)):
            if n and time.perf_counter() >= until:
                break
            seq, make = self._held.pop(combat_id)
            body = self._encode_snapshot(combat_id, make)
            if body is not None:
                rows.append((combat_id, seq, body))
        unmoved, unindexed = self._unmoved or 0, self._unindexed or 0
        moving = unmoved >= self._move_bytes
        indexing = unindexed >= REQUEST_KEYS_EVERY
        try:
            db.execute("BEGIN IMMEDIATE")
            if rows:
                db.executemany(
                    "INSERT OR REPLACE INTO snapshots (combat_id, seq, body) VALUES (?, ?, ?)",
                    rows,
                )
            if indexing:
                self._index_requests()
            if moving:
                self._move_events()
            db.execute("COMMIT")
        except sqlite3.Error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            log.warning("store_aside_failed", snapshots=len(rows), exc_info=True)
            self._aside_failed = self.transactions
            return
        if moving:
            self._unmoved = 0
        if indexing:
            self._unindexed = 0
        self._checkpointer.nudge()

    def _encode_snapshot(self, combat_id: str, make: Callable[[], Any]) -> bytes | None:
        """A held snapshot encoded (committer's thread), or None for one that fails: it is left
        out, since a snapshot only shortens the next start's replay."""
        try:
            return _pack(make())
        except Exception:
            log.exception("snapshot_not_encoded", combat=combat_id)
            return None

    def _stored_last(self, combat_id: str) -> int | None:
        """The combat's last seq in the database (0 for no event), or None for no such
        combat; remembered in ``_last`` (committer's thread)."""
        db = self._writer
        if db.execute("SELECT 1 FROM combats WHERE combat_id = ?", (combat_id,)).fetchone() is None:
            return None
        (last,) = db.execute(_LAST_SEQ, (combat_id,)).fetchone()
        self._last[combat_id] = last
        return int(last)

    def _write_together(self, group: Sequence[_Pending]) -> None:
        """Check each batch against the log as the batches before it leave it (a refused one
        gets its ``error`` and leaves the log as it was), then insert the rest, a statement
        per table and ``ROWS_PER_INSERT`` rows (committer's thread, inside the transaction)."""
        ends: dict[str, int] = {}  # each combat's last seq as this group leaves it
        taken: set[tuple[str, str]] = set()  # the request ids this group stores
        combats: list[tuple[str, str, float, str]] = []
        events: list[tuple[str, int, bytes]] = []
        requests: list[tuple[str, str, str, bytes | None, float]] = []
        # One row per combat, the group's last: the earlier ones would be overwritten at once.
        summaries: dict[str, bytes] = {}
        known = self._last
        for pending in group:
            b = pending.batch
            combat_id, request = b.combat_id, b.request
            last = ends.get(combat_id)
            if last is None:
                last = known.get(combat_id)
                if last is None:
                    last = self._stored_last(combat_id)
            if b.ruleset is not None:
                if last is not None:
                    pending.error = _conflict(f"combat {combat_id!r} exists")
                    continue
                last = 0
                combats.append((combat_id, b.ruleset, b.at, b.table))
            elif last is None:
                pending.error = _conflict(f"combat {combat_id!r} does not exist")
                continue
            # A snapshot alone (see ``Batch``) must be of the log as it ends, like events.
            if (pending.events or b.snapshot is not None) and b.first_seq != last + 1:
                pending.error = _conflict(
                    f"combat {combat_id!r} is at seq {last}, batch starts at {b.first_seq}"
                )
            elif request is not None and (request in taken or self._stored(request)):
                pending.error = _conflict(_request_taken(request))
            if pending.error is not None:
                if b.ruleset is not None:
                    combats.pop()
                continue
            ends[combat_id] = last + len(pending.events)
            events += pending.events
            if request is not None:
                taken.add(request)
                requests.append((*request, combat_id, pending.response, b.at))
            if pending.summary is not None:
                summaries[combat_id] = pending.summary
        db = self._writer
        if combats:
            db.executemany(
                "INSERT INTO combats (combat_id, ruleset, created_at, table_id)"
                " VALUES (?, ?, ?, ?)",
                combats,
            )
        if events:
            _INSERT_EVENTS.run(db, events)
        if requests:
            _INSERT_REQUESTS.run(db, requests)
        if summaries:
            _INSERT_SUMMARIES.run(db, list(summaries.items()))

    def _stored(self, request: tuple[str, str]) -> bool:
        """Whether the request id is stored already (committer's thread), adding it to the
        filter: no table has it as a unique key any more (see ``requests``), so the committer
        is what refuses it twice. The filter rules out almost every new one without a read."""
        assert self._filter is not None
        if not self._filter.add(request):
            return False
        return self._writer.execute(_REQUEST_ROW, request).fetchone() is not None

    def _index_requests(self) -> None:
        """Index the remembered requests appended since the last time (committer's thread,
        inside the transaction of ``_write_aside``): in key order, so each
        page of ``request_keys`` is written once for all the keys it takes. ``OR IGNORE``: the
        committer never stores an id twice, and were one stored twice anyway (a file edited by
        hand), the first row keeps answering instead of every later commit failing."""
        db = self._writer
        db.execute(
            "INSERT OR IGNORE INTO request_keys (principal, request_id, row)"
            " SELECT principal, request_id, id FROM requests"
            " WHERE id > (SELECT value FROM meta WHERE key = 'requests_indexed')"
            " ORDER BY principal, request_id"
        )
        db.execute(
            "UPDATE meta SET value = (SELECT coalesce(max(id), value) FROM requests)"
            " WHERE key = 'requests_indexed'"
        )

    def _move_events(self) -> None:
        """Move every event of ``recent_events`` into ``events`` (committer's thread, inside the
        transaction of ``_write_aside``, or alone at a clean stop), in
        key order, so each page of ``events`` is rewritten once for all it takes. ``OR IGNORE``:
        a seq is never stored twice by the committer; were one anyway (a file edited by hand),
        the one in ``events`` stays instead of every later commit failing."""
        db = self._writer
        db.execute(
            "INSERT OR IGNORE INTO events (combat_id, seq, body)"
            " SELECT combat_id, seq, body FROM recent_events ORDER BY combat_id, seq"
        )
        db.execute("DELETE FROM recent_events")

    def _move_all(self) -> None:
        """Move the recent events in a transaction of their own (committer's thread, at a clean
        stop). One that fails is left: every read takes both tables anyway."""
        db = self._writer
        try:
            db.execute("BEGIN IMMEDIATE")
            self._move_events()
            db.execute("COMMIT")
        except sqlite3.Error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            log.warning("recent_events_not_moved", exc_info=True)
            return
        self._unmoved = 0

    def _build_filter(self) -> _Filter:
        """A filter of every request id stored (committer's thread, outside a transaction)."""
        built = _Filter()
        with contextlib.closing(
            self._writer.execute(
                # The index is the smaller read: no responses in it.
                "SELECT principal, request_id FROM request_keys UNION ALL"
                " SELECT principal, request_id FROM requests"
                " WHERE id > (SELECT value FROM meta WHERE key = 'requests_indexed')"
            )
        ) as rows:
            for row in rows:
                built.add(row)
        built.built()
        return built

    def _remember(self, group: Sequence[_Pending]) -> None:
        """Keep the answers just committed in memory (event loop, before their waiters go
        on), for a retry to find without a database read."""
        for pending in group:
            b = pending.batch
            if pending.error is None and b.request is not None and pending.response is not None:
                self._recent.add(*b.request, b.combat_id, pending.response, b.at)

    def _wal_size(self) -> int:
        try:
            return os.stat(self._wal).st_size
        except FileNotFoundError:
            return 0

    def _trim_wal(self) -> None:
        """Copy the WAL into the database and truncate it (committer's thread, outside a
        transaction).

        Run once a commit leaves the WAL over half its share (after that group's answers), so
        the next transaction starts with the other half free for what it adds; without a
        quota, once it leaves the WAL over ``WAL_MAX_BYTES``. The checkpointer's rounds
        (``_Checkpointer``) do the usual copying.
        A checkpoint that cannot finish (a reader kept it waiting past the busy timeout, or the
        disk failed) is left: the check before the next transaction runs it again, and refuses
        that transaction if the WAL is still over half its share. Without a quota a reader on an
        older snapshot (an online backup, an operator's ``sqlite3`` shell) is not waited for:
        nothing is refused for a longer WAL, and waiting would hold every group back by the
        busy timeout for as long as the reader reads.
        """
        self._trim_due = False
        with self._checkpointer.lock, contextlib.suppress(sqlite3.Error):
            self._checkpoint("TRUNCATE", wait=self._wal_limit is not None)

    def _checkpoint(self, mode: str, *, wait: bool) -> None:
        """Run ``wal_checkpoint(mode)`` on the writer, waiting for readers up to the busy timeout
        only if ``wait``."""
        db = self._writer
        if wait:
            db.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
            return
        db.execute("PRAGMA busy_timeout=0")
        try:
            db.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        finally:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")

    def _restart_wal(self) -> None:
        """Copy the frames the checkpointer's last round left and start the WAL again from its
        start (committer's thread, outside a transaction, with no batch queued): see
        ``WAL_RESTART_BYTES``. A reader on an older snapshot is not waited for (the committer
        would wait with it): the checkpoint copies what it can and the next round retries."""
        self._checkpointer.caught_up = False
        with self._checkpointer.lock, contextlib.suppress(sqlite3.Error):
            self._checkpoint("RESTART", wait=False)

    def _write_batch(self, pending: _Pending) -> None:
        db = self._writer
        b = pending.batch
        if b.ruleset is not None:
            db.execute(
                "INSERT INTO combats (combat_id, ruleset, created_at, table_id)"
                " VALUES (?, ?, ?, ?)",
                (b.combat_id, b.ruleset, b.at, b.table),
            )
        elif (
            db.execute("SELECT 1 FROM combats WHERE combat_id = ?", (b.combat_id,)).fetchone()
            is None
        ):
            raise _ConflictError(f"combat {b.combat_id!r} does not exist")
        if pending.events or b.snapshot is not None:
            # A snapshot alone (see ``Batch``) must be of the log as it ends, like events.
            (last,) = db.execute(_LAST_SEQ, (b.combat_id,)).fetchone()
            if b.first_seq != last + 1:
                raise _ConflictError(
                    f"combat {b.combat_id!r} is at seq {last}, batch starts at {b.first_seq}"
                )
        if pending.events:
            db.executemany(
                "INSERT INTO recent_events (combat_id, seq, body) VALUES (?, ?, ?)",
                pending.events,
            )
        if b.request is not None:
            if db.execute(_REQUEST_ROW, b.request).fetchone() is not None:
                raise _ConflictError(_request_taken(b.request))
            assert self._filter is not None
            self._filter.add(b.request)  # as ``_stored`` does
            db.execute(
                "INSERT INTO requests (principal, request_id, combat_id, response, at)"
                " VALUES (?, ?, ?, ?, ?)",
                (*b.request, b.combat_id, pending.response, b.at),
            )
        if pending.summary is not None:
            db.execute(
                "INSERT OR REPLACE INTO summaries (combat_id, body) VALUES (?, ?)",
                (b.combat_id, pending.summary),
            )

    def _prune(self) -> None:
        """Forget requests older than REQUEST_MEMORY_SECONDS or past MAX_REMEMBERED_REQUESTS.

        Age is measured on the batches' own clock (``Batch.at``), so the store reads no clock.
        A failed prune is dropped: it changes no answer the daemon gives, and runs again later.
        """
        db = self._writer
        cutoff = self._latest_at - REQUEST_MEMORY_SECONDS
        added, self._added = self._added, {}
        bounds: dict[str, int] = {}  # kept once the prune commits
        try:
            db.execute("BEGIN IMMEDIATE")
            # The oldest rows by insertion, up to the first one still young: every row before it
            # is old, and goes by a range of rowids. A row older than one inserted before it (the
            # clock stepped back) waits for that one, remembered longer than promised, never
            # less; a walk that stops at the first young row reads one row when none is old.
            oldest = None
            with contextlib.closing(
                db.execute(
                    "SELECT rowid, at FROM requests ORDER BY rowid LIMIT ?", (PRUNE_MAX_ROWS,)
                )
            ) as rows:
                for rowid, at in rows:
                    if at >= cutoff:
                        break
                    oldest = rowid
            if oldest is not None:
                self._forget_requests("id <= ?1", (oldest,))
            for principal, more in added.items():
                # An upper bound on the principal's rows: counted once (a walk of its rows),
                # then grown by what it adds; deletions only make it looser. Under the cap, no
                # walk; over it, the walk that finds the rows past the cap, as before.
                bound = self._bounds.get(principal)
                if bound is None:
                    (bound,) = db.execute(
                        "SELECT count(*) FROM requests WHERE principal = ?", (principal,)
                    ).fetchone()
                else:
                    bound += more
                if bound > MAX_REMEMBERED_REQUESTS:
                    # The at of the newest row past the cap; NULL (delete nothing) if under it.
                    deleted = self._forget_requests(
                        "id IN (SELECT id FROM requests WHERE principal = ?1 AND at <= (SELECT at"
                        " FROM requests WHERE principal = ?1 ORDER BY at DESC LIMIT 1 OFFSET ?2)"
                        " LIMIT ?3)",
                        (principal, MAX_REMEMBERED_REQUESTS, PRUNE_MAX_ROWS),
                    )
                    bound -= deleted
                    if deleted < PRUNE_MAX_ROWS:
                        # All past the cap went (if any were): at most the cap is left.
                        bound = min(bound, MAX_REMEMBERED_REQUESTS)
                bounds[principal] = bound
            db.execute("COMMIT")
        except sqlite3.Error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            # What they added since their bounds is lost with ``added``: counted again.
            for principal in added:
                self._bounds.pop(principal, None)
            return
        if len(self._bounds) + len(bounds) > MAX_BOUNDS:
            self._bounds.clear()  # the bounds forgotten are counted again, once each
        self._bounds.update(bounds)

    def _forget_requests(self, where: str, args: tuple[Any, ...]) -> int:
        """Delete the remembered requests ``where`` says, and their keys (committer's thread,
        inside the prune's transaction); how many. The rows are listed first, since the keys
        are found by theirs, and a limited ``where`` must mean the same rows twice: at most
        ``PRUNE_MAX_ROWS`` of them, in key order, so each page of the index is written once."""
        db = self._writer
        rows = db.execute(
            f"SELECT id, principal, request_id FROM requests WHERE {where}"
            " ORDER BY principal, request_id",
            args,
        ).fetchall()
        db.executemany(
            "DELETE FROM request_keys WHERE principal = ? AND request_id = ? AND row = ?",
            [(principal, request_id, row) for row, principal, request_id in rows],
        )
        db.executemany("DELETE FROM requests WHERE id = ?", [(row,) for row, _, _ in rows])
        return len(rows)

    # -- reading ---------------------------------------------------------------------------------

    def summaries(self) -> list[tuple[str, Any]]:
        """Every combat in creation order with its last summary (None if it has none or the
        summary does not decode: then the caller rebuilds that combat at once)."""
        rows = self._reader.execute(
            "SELECT c.combat_id, s.body FROM combats c LEFT JOIN summaries s USING (combat_id)"
            " ORDER BY c.created_at, c.rowid"
        ).fetchall()
        result: list[tuple[str, Any]] = []
        for combat_id, body in rows:
            try:
                result.append((combat_id, None if body is None else _unpack(body)))
            except ValueError:
                result.append((combat_id, None))
        return result

    def memberships(self) -> dict[str, str]:
        """The table of every combat not of the default table, by combat id."""
        rows = self._reader.execute(
            "SELECT combat_id, table_id FROM combats WHERE table_id != ?", (DEFAULT_TABLE,)
        ).fetchall()
        return dict(rows)

    def load_one(self, combat_id: str) -> LoadedCombat:
        """One combat as found at start-up, with its snapshot, for rebuilding it (from any
        thread, see ``replay``).

        Every stored event was acknowledged (or committed for a command whose reply was lost,
        and remembered for its retry): a SQLite commit is atomic, so no row can be torn, and
        none is ever dropped. A gap anywhere in the combat's sequence, before the snapshot
        too, quarantines it; it is found by counting the rows, so a load reads no event body.
        An event that does not decode is found where it is read: ``replay`` after the
        snapshot, ``events_after`` (history) before it. An unreadable snapshot only costs
        time: the combat is replayed from its whole log instead, and ``warnings`` says so.
        Raises ``StoreError("store_failed")`` for a combat the store does not hold.
        """

        with self._loading:
            row = self._loader.execute(
                "SELECT combat_id, ruleset, created_at FROM combats WHERE combat_id = ?",
                (combat_id,),
            ).fetchone()
            if row is None:
                raise StoreError("store_failed", "no combat {id!r} in the store", id=combat_id)
            return self._load_combat(self._loader, *row)

    def replay(self, combat_id: str, after: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """The combat's events after ``after``, decoded, in order: for rebuilding it.

        Read MAX_EVENTS_PER_READ at a time on the loader's own connection, which any thread
        may use (one call at a time): a rebuild runs in a worker thread, and no read
        transaction stays open between pages to hold back checkpoints (and so the WAL's size)
        however long the log. Raises ``StoreError("store_failed")`` naming the seq of an event
        that does not decode or is missing.
        """
        expected = after + 1
        while True:
            with self._loading:
                rows = self._loader.execute(
                    _EVENTS_AFTER, (combat_id, expected - 1, MAX_EVENTS_PER_READ)
                ).fetchall()
            for seq, body in rows:
                if seq != expected:
                    raise StoreError(
                        "store_failed",
                        "seq {seq} is missing (next stored is {next})",
                        seq=expected,
                        next=seq,
                    )
                yield seq, self._event(seq, body)
                expected += 1
            if len(rows) < MAX_EVENTS_PER_READ:
                return

    @staticmethod
    def _load_combat(
        db: sqlite3.Connection, combat_id: str, ruleset: str, created_at: float
    ) -> LoadedCombat:
        def quarantined(reason: str) -> LoadedCombat:
            return LoadedCombat(combat_id, ruleset, created_at, None, 0, quarantined=reason)

        snapshot: tuple[int, Any] | None = None
        warnings: list[str] = []
        row = db.execute(
            "SELECT seq, body FROM snapshots WHERE combat_id = ?", (combat_id,)
        ).fetchone()
        if row is not None:
            try:
                snapshot = (row[0], _unpack(row[1]))
            except ValueError as e:
                warnings.append(
                    f"combat {combat_id}: snapshot at seq {row[0]} is unreadable ({e}),"
                    " loaded from the whole log"
                )
        # Seqs are unique (the primary key), so 1..last without a gap is exactly last rows.
        count, first, last = db.execute(
            "SELECT count(*), coalesce(min(seq), 1), coalesce(max(seq), 0) FROM"
            " (SELECT seq FROM events WHERE combat_id = ?1"
            " UNION ALL SELECT seq FROM recent_events WHERE combat_id = ?1)",
            (combat_id,),
        ).fetchone()
        if count != last or first != 1:
            # Only a damaged log pays for finding where: a walk of its seqs.
            expected = 1
            with contextlib.closing(
                db.execute(
                    "SELECT seq FROM events WHERE combat_id = ?1"
                    " UNION ALL SELECT seq FROM recent_events WHERE combat_id = ?1 ORDER BY 1",
                    (combat_id,),
                )
            ) as seqs:
                for (seq,) in seqs:
                    if seq != expected:
                        break
                    expected += 1
            return quarantined(f"seq {expected} is missing (next stored is {seq})")
        if row is not None and row[0] > last:
            return quarantined(f"seq {last + 1} is missing (the snapshot is at seq {row[0]})")
        return LoadedCombat(combat_id, ruleset, created_at, snapshot, last, warnings)

    async def events_after(
        self, combat_id: str, seq: int, limit: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``limit`` (at most MAX_EVENTS_PER_READ) events of the combat after ``seq``,
        read on the event loop (a page of a local file is quicker than a hop to a thread).

        Raises ``StoreError("store_failed")`` if a stored event does not decode.
        """
        rows = self._reader.execute(
            _EVENTS_AFTER, (combat_id, seq, max(0, min(limit, MAX_EVENTS_PER_READ)))
        ).fetchall()
        return [(s, self._event(s, body)) for s, body in rows]

    async def lookup_request(self, principal: str, request_id: str) -> tuple[str, Any] | None:
        """The combat id and response remembered for a retried request, or None if forgotten.

        A recent answer is in memory, and a request id never stored is known as such from a
        filter of those stored: only an older one (or one the filter cannot rule out) is read
        from the database, in a worker thread, so a slow disk never stalls the event loop.
        """
        found = self._recent.get(principal, request_id)
        if found is not None and found[2] < self._latest_at - REQUEST_MEMORY_SECONDS:
            found = None  # forgotten by age (``_prune``), as the database forgets it
        if found is None:
            known = self._filter
            if known is not None and not known.maybe(principal, request_id):
                return None
            found = await anyio.to_thread.run_sync(self._stored_request, principal, request_id)
            if found is None:
                return None
        combat_id, body, _ = found
        try:
            return combat_id, _unpack(body)
        except ValueError as e:
            raise StoreError(
                "store_failed",
                "the response remembered for {principal}/{request} is unreadable: {reason}",
                principal=principal,
                request=request_id,
                reason=str(e),
            ) from e

    def _stored_request(self, principal: str, request_id: str) -> tuple[str, bytes, float] | None:
        """A remembered request's row (worker thread, on the loader's connection)."""
        with self._loading:
            row = self._loader.execute(_REQUEST_ROW, (principal, request_id)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    @staticmethod
    def _event(seq: int, body: object) -> dict[str, Any]:
        try:
            return _unpack_event(body)
        except ValueError as e:
            raise StoreError(
                "store_failed", "event {seq} is unreadable: {reason}", seq=seq, reason=str(e)
            ) from e


__all__ = [
    "COMMIT_QUEUE",
    "FIRST_EPOCH",
    "MAX_BATCHES_PER_COMMIT",
    "MAX_EVENTS_PER_READ",
    "MAX_REMEMBERED_REQUESTS",
    "REQUEST_MEMORY_SECONDS",
    "Batch",
    "LoadedCombat",
    "Store",
    "StoreError",
]
