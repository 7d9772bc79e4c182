"""The PostgreSQL store: every combat's event log in one PostgreSQL database, written by one
committer thread, with the SQLite store's guarantees (``turnkeeper.stores.port``).

A command is acknowledged only after its events are committed: each write transaction sets
``synchronous_commit = on`` whatever the server's default, so ``COMMIT`` returns once the
server has flushed its WAL. Commands arriving together share one transaction (group commit): a
``COPY`` per table for the events and requests, one statement for the rest. Bodies are the
same msgpack as the SQLite store's.

Driver: psycopg 3, synchronous, in the committer's thread as the SQLite store runs sqlite3
(``docs/scale-out.md`` has the measurement against asyncpg). Tables live in the ``turnkeeper``
schema, made and upgraded by versioned migrations (``MIGRATIONS``), applied on start or by
``turnkeeper migrate``.

Many daemons share one database (issue 12, part 3): each combat is owned by one daemon at a
time through a lease on its row (owner, epoch, expiry by the server's clock), taken before the
combat is loaded (``acquire``), renewed for all a daemon holds in one statement by a background
thread (``_Leases``) and given back on a clean stop or when another daemon asks for it
(``release``, over ``LISTEN``/``NOTIFY``). Every append is fenced: conditional on the last seq
the committer expected and on the epoch it holds (``_write_together``), so a daemon that lost a
lease (paused, partitioned, slow) can never append to that combat again; and a daemon that
cannot renew stops writing for a combat before its lease could expire (``_Lease.until``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal, TypeVar

import anyio
import msgpack  # type: ignore[import-untyped]
import psycopg
import psycopg.sql
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from psycopg import conninfo

from ..store import (
    COMMIT_QUEUE,
    DEFAULT_TABLE,
    FIRST_EPOCH,
    MAX_BATCHES_PER_COMMIT,
    MAX_EVENTS_PER_READ,
    MAX_REMEMBERED_REQUESTS,
    PRUNE_EVERY_COMMITS,
    PRUNE_MAX_ROWS,
    REQUEST_MEMORY_SECONDS,
    Batch,
    LoadedCombat,
    StoreError,
    _CommitterThread,
    _conflict,
    _Filter,
    _pack,
    _Pending,
    _Recent,
    _request_taken,
    _unpack,
    _unpack_event,
)
from . import changes
from .port import ListedCombat

log = structlog.get_logger("turnkeeper.store")

_T = TypeVar("_T")
_Connection = psycopg.Connection[Any]

SCHEMA = "turnkeeper"
"""The PostgreSQL schema holding the store's tables, so that a database shared with other
applications keeps them apart."""

STORE_LOCK = 0x746B_5354_4F52_4531
"""The advisory lock a migration holds for its transaction: two daemons starting at once apply
each migration once, and a daemon of an older version (which held this lock for as long as it
ran) is never migrated under."""

MIN_SERVER_VERSION = 130000
"""The oldest PostgreSQL server the store runs on (``server_version_num``): 13, the first with
the 64-bit transaction ids the change stamps use (``xid8``, ``pg_current_xact_id``,
``pg_snapshot_xmin``, migration 9)."""

MIGRATION_LOCK_TIMEOUT = "10s"
"""How long a migration waits for a lock on a table before failing (``lock_timeout``)."""

CONNECT_TIMEOUT = 10
"""Seconds to reach the server before the start (or a reconnection) fails."""

READ_TIMEOUT = 5.0
"""Seconds a read for a client (``events_after``) waits for the server before the client is
told ``store_unavailable``."""

WRITE_TIMEOUT = 60.0
"""Seconds one write transaction may take before its session is severed (``_Watchdog``): the
server's own ``statement_timeout`` ends a slow statement, this a server that answers nothing."""

STATEMENT_TIMEOUT_MS = 30_000
"""Milliseconds the server lets one statement of the store's run (a hung lock, a runaway
query) before cancelling it: far past any the store sends."""

SESSION_BOUNDS: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
    "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
}
"""libpq's settings bounding each session: a peer silent for about 25 s (keepalives), data
unacknowledged for 30 s (``tcp_user_timeout``) or a statement running 30 s ends it."""

LEASE_SECONDS = 3.0
"""How long a combat's lease lasts past its last renewal, by the server's clock
(``--lease-seconds``): a daemon killed with its combats leased lets another serve them within
this, plus one acquire's poll."""

RENEWALS_PER_LEASE = 4
"""Renewals sent in one lease's time: a renewal that fails (a slow server, a blip) leaves the
next ones time to succeed before the daemon fences itself."""

FENCE_MARGIN = 0.25
"""The part of a lease a daemon gives up to be safe: it stops writing for a combat at the time
its last successful renewal was sent plus ``(1 - FENCE_MARGIN)`` of the lease, so a clock that
runs slow, or a commit still on its way, never outlives the lease the server counts."""

ACQUIRE_POLL = 0.05
"""Seconds between two tries for a lease another daemon holds."""

ACQUIRE_LOCK_WAIT = "200ms"
"""How long one try for a lease waits for a row its owner's transaction holds (a commit, a
few milliseconds): longer, the owner may be paused in the middle of it (``_try_acquire``)."""

WANTED_FOR = 0.5
"""Seconds a lease given back on request is kept for the daemon that asked (``wanted_by``):
the holder's own commands queued behind the release would otherwise take it straight back
before the asker's next poll."""

ASK_AGAIN = 0.5
"""Seconds between two requests to the holder to let a lease go (a request sent while the
holder's listener was away is lost: ``NOTIFY`` is not queued for a session that is not there)."""

ACQUIRE_SLACK = 2.0
"""Seconds an acquire waits beyond one lease's time: the holder's minimum hold
(``MIN_HOLD``), its commits in flight, and a dead holder's lease running out."""

MIN_HOLD = 0.5
"""Seconds a daemon keeps a lease it acquired before it lets it go on request: commands for
one combat arriving at two daemons at once move it to and fro at most this often."""

ADOPT_BATCH = 100
"""Combats due that nobody holds taken over by one scan (``adopt_due``): the next scan takes
the rest."""

RELEASE_REQUESTS = 1024
"""Requests to let a lease go waiting for the daemon to act on them; past it they are dropped
(the asker asks again every ``ASK_AGAIN``)."""

LANDED_WAIT = 30.0
"""Seconds the committer keeps trying to reach the server after losing its session while a
COMMIT was on its way, to learn whether it was kept, before answering ``store_unavailable``
(outcome unknown). A server restarting (a fast stop, a failover) is back well within it."""

LANDED_FIRST_PAUSE = 0.05
LANDED_MAX_PAUSE = 2.0
"""Seconds between two tries to reach the server: doubling from the first to the most."""

FILTER_PAGE = 10_000
"""Request ids fetched per round trip while the filter is built (up to 100,000 per principal
are stored): about a megabyte a page."""

DAEMON_FORGOTTEN = 3600
"""Seconds after its last heartbeat a daemon's row is deleted (by the next daemon to start):
one killed leaves its row behind."""

QUOTA_MEASURE_BYTES = 256 * 2**10
"""Bytes written between two measures of the store's size under a quota. Measuring asks the
server for the size of every relation (a catalog query and a ``stat`` per file), too dear for
every transaction; between two measures the bytes written are added to the last one."""


@dataclass(frozen=True)
class Migration:
    """One step of the schema: applied once, in order, recorded in ``schema_migrations``."""

    version: int
    name: str
    sql: str
    then: Callable[[psycopg.Connection[Any]], None] | None = None
    """What the migration does past SQL, in its transaction, after ``sql``."""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "combats, events, requests, snapshots, summaries",
        f"""
CREATE TABLE {SCHEMA}.combats (
    combat_id text PRIMARY KEY,
    -- The table (group) the combat belongs to (issue 12, part 1).
    table_id text NOT NULL DEFAULT 'default',
    ruleset text NOT NULL,
    created_at double precision NOT NULL,
    -- Creation order, for start-up (created_at may tie).
    position bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    -- The last seq appended: every append is conditional on it (``_write_together``).
    last_seq bigint NOT NULL DEFAULT 0,
    -- The owning daemon's epoch, for fenced appends once many daemons share the database.
    owner_epoch bigint NOT NULL DEFAULT 0
);
CREATE TABLE {SCHEMA}.events (
    combat_id text NOT NULL,
    seq bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (combat_id, seq)
);
CREATE TABLE {SCHEMA}.requests (
    principal text NOT NULL,
    request_id text NOT NULL,
    combat_id text NOT NULL,
    response bytea NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (principal, request_id)
);
CREATE INDEX requests_at ON {SCHEMA}.requests (at);
CREATE INDEX requests_principal_at ON {SCHEMA}.requests (principal, at);
CREATE TABLE {SCHEMA}.snapshots (
    combat_id text PRIMARY KEY,
    seq bigint NOT NULL,
    body bytea NOT NULL
);
CREATE TABLE {SCHEMA}.summaries (
    combat_id text PRIMARY KEY,
    body bytea NOT NULL
);
""",
    ),
    Migration(
        2,
        "the store lock's generation",
        f"""
-- Bumped by each daemon that takes the store lock: one that takes it again after losing its
-- session learns whether another daemon had it meanwhile (``PostgresStore._reconnect``).
CREATE TABLE {SCHEMA}.generation (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    value bigint NOT NULL
);
INSERT INTO {SCHEMA}.generation (value) VALUES (0);
""",
    ),
    Migration(
        3,
        "daemons and combat leases",
        f"""
-- Many daemons on one database: the store-wide lock and its generation go, each combat is
-- leased by one daemon at a time.
DROP TABLE {SCHEMA}.generation;
CREATE TABLE {SCHEMA}.daemons (
    daemon_id text PRIMARY KEY,
    -- Where its clients reach it, if it said (for an operator's eyes).
    address text,
    started timestamptz NOT NULL DEFAULT now(),
    -- Renewed with its leases: a daemon is alive while heartbeat + lease_seconds is ahead.
    heartbeat timestamptz NOT NULL DEFAULT now(),
    lease_seconds double precision NOT NULL,
    -- The server process of its committer's session: a daemon paused in the middle of a
    -- transaction holds its combats' rows until that session ends, which the daemon taking
    -- one over after its lease ran out brings about (``_try_acquire``).
    committer_pid integer
);
-- The lease: the owner and the epoch it acquired (owner_epoch, bumped by every acquire: the
-- fence of every append). It runs out with its owner's heartbeat, by the server's clock: a
-- daemon renews all its leases by renewing its own row.
ALTER TABLE {SCHEMA}.combats ADD COLUMN owner text;
CREATE INDEX combats_owner ON {SCHEMA}.combats (owner) WHERE owner IS NOT NULL;
""",
    ),
    Migration(
        4,
        "daemons' sessions known by name",
        f"""
-- A daemon whose lease has run out has every session of its own ended (each names the daemon
-- in its application_name), not the one its row named, which may be stale or reused.
ALTER TABLE {SCHEMA}.daemons DROP COLUMN committer_pid;
""",
    ),
    Migration(
        5,
        "a released lease kept for its asker",
        f"""
-- The daemon a lease was given back to on its request, and since when (by the server's
-- clock): only it may take the free lease for ``WANTED_FOR`` seconds.
ALTER TABLE {SCHEMA}.combats ADD COLUMN wanted_by text, ADD COLUMN wanted_at timestamptz;
""",
    ),
    Migration(
        6,
        "each combat's next deadline",
        f"""
-- The next deadline of the combat's clock (its summary's, written with it), so that a daemon
-- finds the combats due that nobody holds (``adopt_due``). Null: none, or not written since.
ALTER TABLE {SCHEMA}.combats ADD COLUMN deadline double precision;
CREATE INDEX combats_deadline ON {SCHEMA}.combats (deadline) WHERE deadline IS NOT NULL;
""",
    ),
    Migration(
        7,
        "tables, their managers and tokens, shared by the daemons",
        f"""
-- What a daemon of its own keeps in its data directory's tokens.json, here for every daemon
-- on the database (``turnkeeper.stores.tokens``). A token is kept as the SHA-256 of its
-- secret, never the secret. ``position`` keeps the order they were made in, as the file does.
CREATE TABLE {SCHEMA}.tables (
    table_id text PRIMARY KEY,
    name text NOT NULL,
    created double precision NOT NULL,
    position bigint GENERATED ALWAYS AS IDENTITY UNIQUE
);
CREATE TABLE {SCHEMA}.tokens (
    token_id text PRIMARY KEY,
    role text NOT NULL CHECK (role IN ('narrator', 'player', 'observer', 'bridge')),
    user_id text,
    narrator boolean NOT NULL,
    -- Unique: a hello looks its secret's hash up here when no daemon's copy has it yet.
    hash text NOT NULL UNIQUE,
    created double precision NOT NULL,
    -- 'default' (the table every daemon has, with no row), or one of tables.
    table_id text NOT NULL,
    host boolean NOT NULL,
    position bigint GENERATED ALWAYS AS IDENTITY UNIQUE
);
-- The hosting bridges' tokens that manage a table: the one that made it, those granted it.
CREATE TABLE {SCHEMA}.table_managers (
    table_id text NOT NULL REFERENCES {SCHEMA}.tables ON DELETE CASCADE,
    token_id text NOT NULL REFERENCES {SCHEMA}.tokens ON DELETE CASCADE,
    position bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    PRIMARY KEY (table_id, token_id)
);
""",
    ),
    Migration(
        8,
        "combats paged by id",
        f"""
-- ``list_combats`` pages on a shared store come from here (``combat_page``), in code-point
-- order of the ids (``COLLATE "C"``: the primary key sorts by the database's collation). At
-- 100,000 combats a page read 12 ms (one table) to 140 ms (every table) without them, a
-- sort of every row; 1 to 6 ms with them.
CREATE INDEX combats_table_page ON {SCHEMA}.combats (table_id, combat_id COLLATE "C");
CREATE INDEX combats_page ON {SCHEMA}.combats (combat_id COLLATE "C");
""",
    ),
    Migration(
        9,
        "each combat's last change, and the deadlines of combats written before version 6",
        f"""
-- The transaction that last grew the combat's log (or made it), set by each commit with
-- last_seq: a daemon asks which combats changed since a watermark (``changed_since``), every
-- combat covered, a page at a time, where a lost notification would otherwise go unnoticed.
-- A transaction id, not a sequence: a transaction that took a lower sequence value may commit
-- after one that took a higher, whereas every transaction whose id is below a snapshot's xmin
-- has ended. 0: not changed since this migration.
ALTER TABLE {SCHEMA}.combats ADD COLUMN changed xid8 NOT NULL DEFAULT '0';
ALTER TABLE {SCHEMA}.combats ALTER COLUMN changed SET DEFAULT pg_current_xact_id();
CREATE INDEX combats_changed ON {SCHEMA}.combats (changed, combat_id COLLATE "C");
""",
        then=lambda db: _stored_deadlines(db),
    ),
    Migration(
        10,
        "request ids stamped by the server",
        f"""
-- When the request id was stored, by the server's clock (the start of its transaction): every
-- daemon's ids age by one clock, the one the prune reads, whichever daemon's own runs ahead,
-- and a failover to a server whose clock differs changes nothing a daemon keeps.
ALTER TABLE {SCHEMA}.requests ALTER COLUMN at SET DEFAULT extract(epoch FROM now());
""",
    ),
)
"""Every schema version, oldest first. A released migration never changes: a new one is added."""


SCHEMA_VERSION = MIGRATIONS[-1].version

DAEMONS_SINCE = 3
"""The first version whose database lists its daemons (``daemons``)."""


class _ConflictError(Exception):
    """A batch (or a group's conditional append) that does not fit the log."""


LOST = (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)
"""Errors after which the session is gone. The server ends a session idle in its transaction
past ``idle_in_transaction_session_timeout`` (a daemon paused, SIGSTOP, mid-transaction) with an
error psycopg files under InternalError: it is as lost as one ended by an outage."""


class _FencedError(Exception):
    """A batch for a combat whose lease this daemon no longer holds."""


def _moved(combat_id: str) -> StoreError:
    """The refusal of a write for a combat this daemon lost the lease of: another daemon
    serves it now, or may (this one could not renew in time)."""
    return StoreError(
        "combat_moved",
        "combat {id!r} moved to another daemon: retry with the same request_id",
        "combat",
        id=combat_id,
    )


@dataclass(slots=True)
class _Lease:
    """A combat's lease as this daemon holds it."""

    epoch: int
    """The ``owner_epoch`` its acquire set: every append is conditional on it."""
    until: float
    """Monotonic time past which this daemon writes nothing for the combat: when the last
    acquire or renewal that reached the server was sent, plus the lease less its margin."""
    since: float
    """Monotonic time it was acquired (``MIN_HOLD``)."""


class _Leases:
    """The combats this daemon holds (any thread), and the thread that renews them all, one
    statement every ``seconds / RENEWALS_PER_LEASE``, and hears other daemons ask for one
    (``LISTEN`` on its own channel, on the same session between two renewals).

    A lease runs out with its owner's heartbeat (``daemons``), not a time of its own: renewing
    them all is writing one row, however many combats a daemon holds (a time per combat row
    would rewrite every held row four times a lease)."""

    def __init__(self, location: str, daemon_id: str, seconds: float, address: str | None) -> None:
        self.location = location
        self.daemon_id = daemon_id
        self.seconds = seconds
        self.address = address
        self.channel = f"turnkeeper_release_{daemon_id}"
        self.alone = True
        """Whether no other daemon has run on the database since this one started, as far
        as its renewals have seen, and none stored a request id this one then stored again
        (once false, never true again)."""
        self.asked: Callable[[str, str | None, int | None], None] | None = None
        """Called (on the renewer's thread) with each combat another daemon asks for, the
        daemon that asks (None: the lease was found lost) and the epoch of the lease the
        request is about (None: a daemon before requests named it)."""
        self._held: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self._db: _Connection | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, combat_id: str, epoch: int, sent: float) -> None:
        """Record an acquire (or a creation) that reached the server, sent at ``sent``."""
        now = time.monotonic()
        with self._lock:
            self._held[combat_id] = _Lease(epoch, sent + self.seconds * (1 - FENCE_MARGIN), now)

    def epoch(self, combat_id: str) -> int | None:
        """The epoch to fence a write for the combat with, or None if this daemon does not
        hold its lease, or may no longer (fenced itself: dropped)."""
        with self._lock:
            lease = self._held.get(combat_id)
            if lease is None:
                return None
            if time.monotonic() < lease.until:
                return lease.epoch
            del self._held[combat_id]
        log.warning("lease_fenced", combat=combat_id, detail="not renewed in time")
        return None

    def drop(self, combat_id: str, epoch: int | None = None) -> _Lease | None:
        """Forget the combat's lease (only if still of ``epoch``, when given)."""
        with self._lock:
            lease = self._held.get(combat_id)
            if lease is None or (epoch is not None and lease.epoch != epoch):
                return None
            return self._held.pop(combat_id)

    def hold_left(self, combat_id: str) -> float:
        """Seconds before the combat's lease may be given up (``MIN_HOLD``)."""
        with self._lock:
            lease = self._held.get(combat_id)
        return 0.0 if lease is None else max(0.0, lease.since + MIN_HOLD - time.monotonic())

    def start(self, db: _Connection) -> None:
        """Listen on ``db`` (this daemon's own session for leases) and renew from now on."""
        self._db = db
        self._listen(db)
        self._thread = threading.Thread(target=self._run, name="turnkeeper-leases", daemon=True)
        self._thread.start()

    def close(self, wake: Callable[[], None]) -> _Connection | None:
        """Stop renewing; return the session, for the last statements of the store's close.
        ``wake`` (a ``NOTIFY`` on this daemon's channel) ends the renewer's wait for requests,
        once it is told to stop: woken before, it would wait again."""
        self._closed.set()
        wake()
        if self._thread is not None:
            self._thread.join()
        db, self._db = self._db, None
        return db

    def look_around(self, db: _Connection) -> None:
        """Note whether another daemon has been on the database since this one started
        (while alone so far): its row is live, or has a heartbeat since then (one killed
        since, or that ran between two renewals)."""
        if not self.alone:
            return
        row = db.execute(
            f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.daemons o JOIN {SCHEMA}.daemons me"
            " ON me.daemon_id = %s WHERE o.daemon_id <> me.daemon_id"
            " AND (o.heartbeat >= me.started"
            " OR o.heartbeat + o.lease_seconds * interval '1 second' > now()))",
            (self.daemon_id,),
        ).fetchone()
        if row is not None and row[0]:
            self.shared("another daemon runs on the store")

    def shared(self, detail: str) -> None:
        """No longer alone on the database (any thread)."""
        if self.alone:
            self.alone = False
            log.info("store_shared", detail=detail)

    def _listen(self, db: _Connection) -> None:
        db.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self.channel)))

    def _run(self) -> None:
        every = self.seconds / RENEWALS_PER_LEASE
        while not self._closed.is_set():
            sent = time.monotonic()
            try:
                db = self._db
                if db is None or db.broken or db.closed:
                    if db is not None:
                        db.close()
                    db = self._db = _connect(self.location, "leases", self)
                    self._listen(db)
                self._renew(db, sent)
                self.look_around(db)
                for notice in db.notifies(timeout=max(0.0, sent + every - time.monotonic())):
                    if self._closed.is_set():
                        break
                    asker, about, combat_id = _request(notice.payload)
                    if self.asked is not None and combat_id:
                        self.asked(combat_id, asker, about)
            except psycopg.Error as e:
                # The leases are not renewed meanwhile: this daemon fences itself from each at
                # its ``until``, before the server could give it to another daemon.
                log.warning("lease_renewal_failed", reason=_reason(e, self.location))
                self._closed.wait(max(0.0, sent + every - time.monotonic()))

    def _renew(self, db: _Connection, sent: float) -> None:
        with self._lock:
            held = {c: lease.epoch for c, lease in self._held.items()}
        # One statement: the heartbeat (its row made again if it was deleted as forgotten,
        # after a pause of an hour) and which of the leases held have another epoch now.
        rows = db.execute(
            f"WITH beat AS (INSERT INTO {SCHEMA}.daemons"
            " (daemon_id, address, lease_seconds)"
            " VALUES (%(me)s, %(address)s, %(seconds)s)"
            " ON CONFLICT (daemon_id) DO UPDATE SET heartbeat = now())"
            " SELECT u.combat_id"
            " FROM unnest(%(ids)s::text[], %(epochs)s::int8[]) AS u (combat_id, epoch)"
            f" LEFT JOIN {SCHEMA}.combats c ON c.combat_id = u.combat_id"
            " WHERE c.owner_epoch IS DISTINCT FROM u.epoch",
            {
                "me": self.daemon_id,
                "address": self.address,
                "seconds": self.seconds,
                "ids": list(held),
                "epochs": list(held.values()),
            },
        ).fetchall()
        until = sent + self.seconds * (1 - FENCE_MARGIN)
        taken = {combat_id for (combat_id,) in rows}
        lost = []
        with self._lock:
            for combat_id, epoch in held.items():
                lease = self._held.get(combat_id)
                if lease is None or lease.epoch != epoch:
                    continue  # dropped or acquired again meanwhile
                if combat_id in taken:
                    del self._held[combat_id]  # another daemon acquired it
                    lost.append(combat_id)
                else:
                    lease.until = until
        for combat_id in lost:
            log.info("lease_lost", combat=combat_id)
            if self.asked is not None:
                # Let go of it as if asked: the daemon drops what it holds of it in memory,
                # rather than serve reads from a state another daemon has moved on from.
                self.asked(combat_id, None, held[combat_id])


def shown(location: str) -> str:
    """The database a location names, without its password, for messages and logs."""
    try:
        parts = conninfo.conninfo_to_dict(location)
    except psycopg.ProgrammingError:
        return "postgresql://?"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{parts.get('dbname') or ''}"


def _connect(location: str, role: str, leases: _Leases | None = None) -> psycopg.Connection[Any]:
    """A connection in autocommit mode (transactions are explicit), named for
    ``pg_stat_activity`` so that an operator can tell whose it is, and a daemon taking over
    from one whose lease ran out can end its sessions (``_end_sessions``): a daemon's session
    (given its ``leases``) names its daemon id.

    Bounded every way a session can hang: keepalives and ``tcp_user_timeout`` find a server
    or network gone silent, ``statement_timeout`` a statement the server never finishes, and a
    daemon's ``idle_in_transaction_session_timeout`` a transaction left open (the daemon
    paused in the middle of it) for longer than its leases' margin: its row locks never
    outlive its leases (the location's own settings win where it gives them)."""
    bounds = dict(SESSION_BOUNDS)
    name = f"turnkeeper {role} pid {os.getpid()} on {socket.gethostname()}"
    if leases is not None:
        idle = max(1, int(leases.seconds * (1 - FENCE_MARGIN) * 1000))
        bounds["options"] += f" -c idle_in_transaction_session_timeout={idle}"
        # Truncated by the server at 63 bytes: the daemon id, in full, comes first.
        name = f"turnkeeper {role} {leases.daemon_id} pid {os.getpid()}"
    return psycopg.connect(
        location,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        application_name=name,
        **{**bounds, **conninfo.conninfo_to_dict(location)},
    )


def migrate(location: str) -> list[Migration]:
    """Bring the database at ``location`` to this daemon's schema; return what was applied.

    Raises ``StoreError("store_failed")`` if the server cannot be reached, a migration fails
    (then none of this call's is kept: they run in one transaction), or the database is at a
    newer version than this daemon knows (never guessed at)."""
    try:
        with _connect(location, "migrate") as db:
            applied = _migrate(db, location)
            _rewind_changes(db)
            return applied
    except psycopg.Error as e:
        raise StoreError(
            "store_failed",
            "cannot migrate the store at {store}: {reason}",
            store=shown(location),
            reason=_reason(e, location),
        ) from e


def _version(db: psycopg.Connection[Any]) -> int:
    """The database's schema version, 0 before the first migration; read without DDL."""
    row = db.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.schema_migrations",)).fetchone()
    if row is None or row[0] is None:
        return 0
    found = db.execute(f"SELECT coalesce(max(version), 0) FROM {SCHEMA}.schema_migrations")
    (version,) = found.fetchone() or (0,)
    return int(version)


def _migrate(db: psycopg.Connection[Any], location: str) -> list[Migration]:
    """Migrate on ``db``, holding ``STORE_LOCK`` for the transaction. A database at this
    daemon's version is only read: a role without the right to create (a least-privilege one)
    runs an up-to-date store. Raises ``StoreError("store_failed")`` for a server older than
    ``MIN_SERVER_VERSION``, and naming the lock when it is not had within
    ``MIGRATION_LOCK_TIMEOUT`` (another daemon migrating, or one of a version before many
    daemons, which holds it while it runs)."""
    if db.info.server_version < MIN_SERVER_VERSION:  # told as the session began: no read
        raise StoreError(
            "store_failed",
            "{store}: PostgreSQL {server} is too old, the store needs {needed} or newer",
            store=shown(location),
            server=db.info.parameter_status("server_version") or str(db.info.server_version),
            needed=MIN_SERVER_VERSION // 10000,
        )
    version = _version(db)
    if version > SCHEMA_VERSION:
        raise StoreError(
            "store_failed",
            "{store}: schema version {version}, this daemon reads up to {expected}",
            store=shown(location),
            version=str(version),
            expected=SCHEMA_VERSION,
        )
    if version == SCHEMA_VERSION:
        return []
    applied: list[Migration] = []
    with db.transaction():
        # A migration waits this long at most for a table's lock (an operator's open
        # transaction, a backup), then fails whole, rather than queue every session behind it.
        db.execute(f"SET LOCAL lock_timeout = '{MIGRATION_LOCK_TIMEOUT}'")
        try:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (STORE_LOCK,))
        except psycopg.errors.LockNotAvailable as e:
            raise StoreError(
                "store_failed",
                "the store at {store} is being migrated, or used by a turnkeeper daemon of an"
                " older version: stop it, then start again",
                store=shown(location),
            ) from e
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        version = _version(db)  # again, in the transaction
        if version >= DAEMONS_SINCE:
            # Never under a running daemon: it would go on with a schema it does not know.
            alive = db.execute(
                f"SELECT coalesce(address, daemon_id) FROM {SCHEMA}.daemons"
                " WHERE heartbeat + lease_seconds * interval '1 second' > now()"
            ).fetchall()
            if alive:
                raise StoreError(
                    "store_failed",
                    "the store at {store} is in use by another turnkeeper daemon ({holder}):"
                    " stop every daemon on it to migrate",
                    store=shown(location),
                    holder=", ".join(str(row[0]) for row in alive),
                )
        for migration in MIGRATIONS:
            if migration.version > version:
                db.execute(migration.sql.encode())
                if migration.then is not None:
                    migration.then(db)
                db.execute(
                    f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration)
    for migration in applied:
        log.info("store_migrated", version=migration.version, name=migration.name)
    return applied


def _rewind_changes(db: psycopg.Connection[Any]) -> None:
    """Set back to 0 every combat's change stamp (``changed``) that no transaction of this
    cluster has reached yet: ones a dump restored from another cluster, whose transaction ids
    ran further (a new cluster's start low). Left so, they would stand at or past every
    watermark and be read again by every poll, for as long as the ids take to catch up. In a
    live cluster no row the statement's snapshot sees is past its next transaction id, so this
    finds nothing with daemons running (by the ``combats_changed`` index, without taking a
    transaction id itself). A row is set back only if its stamp is still the one that snapshot
    read: a commit stamping it meanwhile (with an id past the snapshot's) leaves it alone."""
    rewound = db.execute(
        f"UPDATE {SCHEMA}.combats c SET changed = '0' FROM (SELECT combat_id, changed"
        f" FROM {SCHEMA}.combats WHERE changed >= pg_snapshot_xmax(pg_current_snapshot()))"
        " AS ahead WHERE c.combat_id = ahead.combat_id AND c.changed = ahead.changed"
    ).rowcount
    if rewound:
        log.info("store_changes_rewound", combats=rewound)


DEADLINES_PAGE = 1000
"""Combats whose deadlines ``_stored_deadlines`` reads and writes at once."""


def _stored_deadlines(db: psycopg.Connection[Any]) -> None:
    """Give each combat without a stored deadline the one its summary tells. A row last
    written before version 6 has none until its next commit, so a deadline of it that fell
    due while nobody held it waited for a read or a command (``adopt_due`` finds combats by
    it). Every commit on PostgreSQL has written the combat's summary with its next deadline
    (``combats.combat.summary``), the very value a commit since version 6 stores: no
    combat needs folding from its log. A summary that does not decode is left alone (its
    combat is rebuilt on its first use). Read a page at a time by a cursor of the
    migration's transaction, so memory stays bounded at any number of combats."""
    with db.cursor(name="turnkeeper_deadlines") as rows:
        rows.itersize = DEADLINES_PAGE
        rows.execute(
            f"SELECT c.combat_id, s.body FROM {SCHEMA}.combats c"
            f" JOIN {SCHEMA}.summaries s USING (combat_id) WHERE c.deadline IS NULL"
        )
        while page := rows.fetchmany(DEADLINES_PAGE):
            found: dict[str, float] = {}
            for combat_id, body in page:
                try:
                    deadline = _deadline(_unpack(body))
                except ValueError:
                    continue
                if deadline is not None:
                    found[combat_id] = deadline
            if found:
                db.execute(
                    f"UPDATE {SCHEMA}.combats c SET deadline = u.deadline"
                    " FROM unnest(%s::text[], %s::float8[]) AS u (combat_id, deadline)"
                    " WHERE c.combat_id = u.combat_id",
                    (list(found), list(found.values())),
                )


def _reason(e: Exception, location: str) -> str:
    """The server's or libpq's words, on one line (they come with a hint on the next), with
    the password of ``location`` blanked out: libpq quotes the part of a location it cannot
    parse, password and all. The words about a location that does not parse are withheld."""
    words = " ".join(str(e).split())
    try:
        password = conninfo.conninfo_to_dict(location).get("password")
    except psycopg.Error:
        return "the location does not parse: check its syntax and percent-encoding"
    if password:
        raw = urllib.parse.urlsplit(location).password if "://" in location else None
        for secret in sorted({str(password), raw or str(password)}, key=len, reverse=True):
            words = words.replace(secret, "***")
    return words


def _error(e: psycopg.Error, location: str) -> StoreError:
    """The client's error for a database error: a stable code and words of the daemon's own.
    The server's words name hosts, ports, columns and the rows of a ``COPY``: they go to the
    daemon's log only."""
    log.warning("store_error", kind=type(e).__name__, reason=_reason(e, location))
    if isinstance(e, psycopg.errors.IntegrityError):
        return StoreError("conflict", "the batch does not fit the stored log")
    if isinstance(e, psycopg.errors.DiskFull | psycopg.errors.OutOfMemory):
        return StoreError("store_full", "the database server is out of space")
    if isinstance(e, LOST):
        return StoreError(
            "store_unavailable", "the database server could not be reached: retry later"
        )
    return StoreError("store_failed", "the database refused the store's statement (see the log)")


class PostgresStore:
    """Every combat's event log, remembered requests and snapshots, in PostgreSQL.

    Lifecycle as ``turnkeeper.stores.port.StorePort``: ``PostgresStore.open`` →
    ``await task_group.start(store.run)`` → recovery → ``commit`` and ``lookup_request`` →
    ``await stop()`` → ``close``.
    """

    transactions: int
    """Write transactions run so far (group commit makes this smaller than batches committed)."""

    def __init__(
        self,
        location: str,
        writer: psycopg.Connection[Any],
        reader: psycopg.Connection[Any],
        loader: psycopg.Connection[Any],
        max_bytes: int | None,
        dir_lock: int | None,
        leases: _Leases,
    ) -> None:
        self._location = location
        self._dir_lock = dir_lock  # the data directory's (``claim_data_dir``): held until close
        self._writer = writer  # the committer's
        self._reader = reader  # the event loop's: autocommit, each statement its own snapshot
        self._loader = loader  # worker threads', one call at a time
        self._loading = threading.Lock()
        self._reading = threading.Lock()  # the reader's: its reads and its reconnection
        self._max_bytes = max_bytes
        self._measured: int | None = None  # the store's size when last measured
        self._written = 0  # bytes written since
        self._send: MemoryObjectSendStream[_Pending]
        self._receive: MemoryObjectReceiveStream[_Pending]
        self._send, self._receive = anyio.create_memory_object_stream[_Pending](COMMIT_QUEUE)
        self.transactions = 0
        self._touched: set[str] = set()
        self._latest_at = 0.0
        # Each combat's last seq as the committer last wrote or read it: the expected seq of
        # its next conditional append. Forgotten when a transaction fails or a reconnection
        # makes what reached the server unknown.
        self._last: dict[str, int] = {}
        self._recent = _Recent()
        self._filter: _Filter | None = None
        self._stopped: anyio.Event | None = None
        self._packer = msgpack.Packer(use_bin_type=True)
        self._committer = _CommitterThread()
        self._watchdog = _Watchdog()
        self._leases = leases
        self.daemon_id = leases.daemon_id
        """This daemon's id in the database (``daemons``), owner of the leases it holds."""
        self._loop: asyncio.AbstractEventLoop | None = None  # the event loop's, while ``run`` runs
        self._asking = threading.Lock()
        self._asking_ids: list[str] = []  # asked for, not yet handed to the event loop
        self._wanted: dict[str, str] = {}  # the daemon that last asked for each combat
        self._about: dict[str, float] = {}
        """The newest epoch the requests for each combat are about, since it was last let go
        (infinite: a request that named none)."""
        self._asked_send, self._asked = anyio.create_memory_object_stream[str](RELEASE_REQUESTS)

    @classmethod
    def open(
        cls,
        location: str,
        *,
        max_bytes: int | None = None,
        dir_lock: int | None = None,
        lease_seconds: float = LEASE_SECONDS,
        address: str | None = None,
    ) -> PostgresStore:
        """Open the store at ``location`` (a libpq URI or conninfo), migrating it to this
        daemon's schema first, as one more daemon on it (``daemons``, with the ``address`` its
        clients reach it at, if given). ``dir_lock``, the data directory's lock
        (``turnkeeper.store.claim_data_dir``), is released by ``close``; so are the leases,
        which last ``lease_seconds`` past their last renewal.

        ``max_bytes`` is an operator's quota on the store's size in the database: its tables,
        indexes and TOAST as ``pg_total_relation_size`` counts them (not the server's WAL,
        nor other databases). Past it every commit fails with ``store_full``. Raises
        ``StoreError("store_failed")`` if the server cannot be reached, the schema is newer
        than this daemon, or a migration could not have its lock.
        """
        connections: list[psycopg.Connection[Any]] = []
        leases = _Leases(location, uuid.uuid4().hex, lease_seconds, address)
        try:
            writer = _connect(location, "committer", leases)
            connections.append(writer)
            _migrate(writer, location)
            _rewind_changes(writer)
            for role in ("reader", "loader", "leases"):
                connections.append(_connect(location, role, leases))
            connections[-1].execute(
                f"WITH gone AS (DELETE FROM {SCHEMA}.daemons"
                " WHERE heartbeat < now() - %s * interval '1 second')"
                f" INSERT INTO {SCHEMA}.daemons (daemon_id, address, lease_seconds)"
                " VALUES (%s, %s, %s)",
                (DAEMON_FORGOTTEN, leases.daemon_id, address, lease_seconds),
            )
            leases.look_around(connections[-1])
            leases.start(connections[-1])
        except psycopg.Error as e:
            for c in connections:
                c.close()
            raise StoreError(
                "store_failed",
                "cannot open the store at {store}: {reason}",
                store=shown(location),
                reason=_reason(e, location),
            ) from e
        except BaseException:
            for c in connections:
                c.close()
            raise
        return cls(location, writer, connections[1], connections[2], max_bytes, dir_lock, leases)

    def close(self) -> None:
        """Give the leases back, and close the connections. Call after ``run``."""
        self._committer.close()
        self._committer.join()
        self._watchdog.close()
        self._send.close()
        self._receive.close()
        self._asked_send.close()
        self._asked.close()
        db = self._leases.close(self._wake_renewer)
        if db is not None:
            # Given back at once rather than left to run out: another daemon may serve them
            # now. Best effort: a server that cannot be reached lets them run out.
            with contextlib.suppress(psycopg.Error), db.transaction():
                db.execute(
                    f"UPDATE {SCHEMA}.combats SET owner = NULL WHERE owner = %s",
                    (self.daemon_id,),
                )
                db.execute(f"DELETE FROM {SCHEMA}.daemons WHERE daemon_id = %s", (self.daemon_id,))
            db.close()
        for c in (self._reader, self._loader, self._writer):
            c.close()
        if self._dir_lock is not None:
            os.close(self._dir_lock)
            self._dir_lock = None

    def _wake_renewer(self) -> None:
        """Wake the renewer, which may wait up to a quarter of a lease for a request."""
        with contextlib.suppress(psycopg.Error):
            self._loader.execute("SELECT pg_notify(%s, '')", (self._leases.channel,))

    # -- leases ----------------------------------------------------------------------------------

    def release_requests(self) -> MemoryObjectReceiveStream[str]:
        """The combats other daemons ask this one to let go of, as they come."""
        return self._asked

    def _ask(self, combat_id: str, asker: str | None, about: int | None) -> None:
        """A request to let a combat go (the renewer's thread), about the lease of epoch
        ``about``: handed to the event loop without waiting for it, a renewal being due
        whatever the loop does (stalled past a lease, it would fence every combat), or dropped
        if the loop's queue is full or the loop is gone (the asker asks again)."""
        loop = self._loop
        if loop is None:
            return
        with self._asking:
            if len(self._asking_ids) >= RELEASE_REQUESTS:
                return
            if asker is not None and (
                combat_id in self._wanted or len(self._wanted) < RELEASE_REQUESTS
            ):
                self._wanted[combat_id] = asker
            if combat_id in self._about or len(self._about) < RELEASE_REQUESTS:
                newest = math.inf if about is None else about
                self._about[combat_id] = max(newest, self._about.get(combat_id, -math.inf))
            self._asking_ids.append(combat_id)
            if len(self._asking_ids) > 1:
                return  # a hand-over is on its way already
        with contextlib.suppress(RuntimeError):  # the loop closed
            loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        """The requests ``_ask`` queued, into ``release_requests`` (the event loop's thread)."""
        with self._asking:
            asked, self._asking_ids = self._asking_ids, []
        for combat_id in asked:
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
                self._asked_send.send_nowait(combat_id)

    def hold_left(self, combat_id: str) -> float:
        """Seconds before this daemon may let the combat go (``MIN_HOLD``)."""
        return self._leases.hold_left(combat_id)

    def stale_request(self, combat_id: str) -> bool:
        """Whether the requests to let the combat go are all about leases older than the one
        this daemon holds: sent before it took the combat back (an asker asks again until it
        has the combat, and one found lost is told as the renewer found it). Then they are
        dropped, and the lease kept; a request the store could not note counts as current."""
        held = self._leases.epoch(combat_id)
        with self._asking:
            if held is None or held <= self._about.get(combat_id, math.inf):
                return False
            self._about.pop(combat_id, None)
            self._wanted.pop(combat_id, None)
        log.info("lease_kept", combat=combat_id, epoch=held, detail="asked about an older lease")
        return True

    async def release(self, combat_id: str) -> None:
        """Give the combat's lease back (after its last commit): another daemon may acquire
        it at once. Nothing is written for the combat from now on, until ``load_one`` again."""
        with self._asking:  # answered, held or not (a lease found lost is let go too)
            wanted = self._wanted.pop(combat_id, None)
            self._about.pop(combat_id, None)
        lease = self._leases.drop(combat_id)
        if lease is None:
            return
        self._last.pop(combat_id, None)
        await anyio.to_thread.run_sync(self._released, combat_id, lease.epoch, wanted)

    def _released(self, combat_id: str, epoch: int, wanted: str | None) -> None:
        with self._loading:
            self._read(
                "loader",
                lambda db: db.execute(
                    f"UPDATE {SCHEMA}.combats SET owner = NULL, wanted_by = %s, wanted_at = now()"
                    " WHERE combat_id = %s AND owner_epoch = %s",
                    (wanted, combat_id, epoch),
                ),
            )
        log.info("lease_released", combat=combat_id)

    def locate(self, combat_id: str) -> str | None:
        """The table of a combat this daemon has not heard of (another daemon made it since
        this one started), or None if the store holds no such combat (any thread)."""
        with self._loading:
            row = self._read(
                "loader",
                lambda db: db.execute(
                    f"SELECT table_id FROM {SCHEMA}.combats WHERE combat_id = %s", (combat_id,)
                ).fetchone(),
            )
        return None if row is None else str(row[0])

    def acquire(self, combat_id: str) -> None:
        """Take the combat's lease (epoch + 1) unless this daemon holds it, when it is free or
        run out;
        else ask its holder to let it go and try again, until it does or its lease runs out
        (a dead holder's). Nothing happens for a combat the store does not hold (``load_one``
        says so). Raises ``StoreError("store_unavailable")`` if the holder keeps it."""
        leases = self._leases
        if leases.epoch(combat_id) is not None:
            return
        deadline = time.monotonic() + leases.seconds + ACQUIRE_SLACK
        asked = -math.inf
        while True:
            sent = time.monotonic()
            with self._loading:
                exists, holder, held, epoch = self._read(
                    "loader", partial(_try_acquire, combat_id, leases.daemon_id)
                )
            if not exists:
                return
            if epoch is not None:
                self._last.pop(combat_id, None)  # another daemon may have appended since
                leases.hold(combat_id, epoch, sent)
                log.info("lease_acquired", combat=combat_id, epoch=epoch)
                return
            now = time.monotonic()
            if now >= deadline:
                raise StoreError(
                    "store_unavailable",
                    "combat {id!r} is held by another daemon that does not let it go: retry later",
                    "combat",
                    id=combat_id,
                )
            if holder is not None and held is not None and now - asked >= ASK_AGAIN:
                asked = now
                ask = partial(_ask_release, holder, combat_id, leases.daemon_id, held)
                with self._loading:
                    self._read("loader", ask)
            time.sleep(ACQUIRE_POLL)

    def adopt_due(self, now: float) -> list[str]:
        """Take the leases of up to ``ADOPT_BATCH`` combats whose deadline is due at ``now``
        that no live daemon holds (free, or their holder dead): their clocks are this
        daemon's to run now (any thread). Rows another session has locked are passed over."""
        leases = self._leases
        sent = time.monotonic()
        with self._loading:
            rows = self._read(
                "loader",
                lambda db: db.execute(
                    f"UPDATE {SCHEMA}.combats SET owner = %(me)s,"
                    " owner_epoch = owner_epoch + 1, wanted_by = NULL"
                    f" WHERE combat_id IN (SELECT combat_id FROM {SCHEMA}.combats"
                    f" WHERE deadline <= %(now)s AND owner IS DISTINCT FROM %(me)s"
                    f" AND {_TAKEABLE} ORDER BY deadline LIMIT %(n)s FOR UPDATE SKIP LOCKED)"
                    f" AND {_TAKEABLE} RETURNING combat_id, owner_epoch",
                    {"me": leases.daemon_id, "now": now, "n": ADOPT_BATCH, "wanted": WANTED_FOR},
                ).fetchall(),
            )
        for combat_id, epoch in rows:
            self._last.pop(combat_id, None)
            leases.hold(combat_id, epoch, sent)
            log.info("lease_acquired", combat=combat_id, epoch=epoch, detail="deadline due")
        return [combat_id for combat_id, _ in rows]

    # -- writing ---------------------------------------------------------------------------------

    async def commit(self, batch: Batch) -> None:
        """Make ``batch`` durable; return only once it is committed. Errors as
        ``turnkeeper.store.Store.commit``'s: ``conflict`` for this batch alone, ``store_full``
        or ``store_failed`` for its whole transaction (nothing of it kept)."""
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
        try:
            try:
                self._send.send_nowait(pending)
            except anyio.WouldBlock:
                await self._send.send(pending)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise StoreError("store_failed", "the store is stopping") from None
        with anyio.CancelScope(shield=True):
            await pending.done
        if pending.error is not None:
            raise pending.error

    async def stop(self) -> None:
        """Accept no more commits, and return once ``run`` has committed everything queued."""
        self._send.close()
        if self._stopped is not None:
            await self._stopped.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The committer: write queued batches, many per transaction, until ``stop``."""
        self._stopped = stopped = anyio.Event()
        self._loop = asyncio.get_running_loop()
        self._leases.asked = self._ask
        task_status.started()
        try:
            async for first in self._receive:
                group = [first]
                while len(group) < MAX_BATCHES_PER_COMMIT:
                    try:
                        group.append(self._receive.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                try:
                    with anyio.CancelScope(shield=True):
                        await self._committer.run(partial(self._write, group))
                    self._remember(group)
                except BaseException:
                    for pending in group:
                        pending.error = StoreError("store_failed", "the committer crashed")
                    raise
                finally:
                    for pending in group:
                        pending.settle()
                if self.transactions % PRUNE_EVERY_COMMITS == 0:
                    with anyio.CancelScope(shield=True):
                        await self._committer.run(self._prune)
        finally:
            self._loop = None
            self._committer.close()
            self._send.close()
            while True:
                try:
                    pending = self._receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                pending.error = StoreError("store_failed", "the store stopped before this commit")
                pending.settle()
            stopped.set()

    def _remember(self, group: Sequence[_Pending]) -> None:
        for pending in group:
            b = pending.batch
            if pending.error is None and b.request is not None and pending.response is not None:
                self._recent.add(*b.request, b.combat_id, pending.response, b.at)

    def _reconnect(self) -> None:
        """A new committer's connection after the last one broke (the server restarted, the
        network failed): the last seqs remembered may be wrong now, since whether the failed
        transaction reached the server is unknown. The leases need nothing: every append is
        fenced by its epoch, whatever happened meanwhile."""
        self._writer.close()
        self._last.clear()
        self._writer = _connect(self._location, "committer", self._leases)
        log.info("store_reconnected", store=shown(self._location))

    def _write(self, group: Sequence[_Pending]) -> None:
        """One transaction for the whole group (committer's thread), as the SQLite store's:
        batches that do not fit the log refused alone, the rest written a statement per table;
        if the server refuses the group (a request id stored already, a combat whose last seq
        moved), it is written again, each batch in its own savepoint."""
        self.transactions += 1
        for pending in group:  # first: the quota counts the snapshots' bytes too
            self._encode_snapshot(pending)
        sent = time.monotonic()  # before the transaction: the leases of combats it creates
        for attempt in (1, 2):
            try:
                if self._writer.broken or self._writer.closed:
                    self._reconnect()
                if self._filter is None or self._filter.worn:
                    self._filter = self._build_filter()
                over = self._over_quota(group)
                break
            except LOST as e:
                # The session was lost since the last transaction (nothing of this group was
                # sent): once on a new one.
                if attempt == 1:
                    self._writer.close()
                    continue
                error = _error(e, self._location)
            except (psycopg.Error, StoreError) as e:
                error = e if isinstance(e, StoreError) else _error(e, self._location)
            for pending in group:
                pending.error = error
            return
        if over is not None:
            for pending in group:
                pending.error = over
            return
        for attempt in (1, 2):
            committing = False  # whether COMMIT was sent: then the outcome may be either
            try:
                db = self._writer
                try:
                    with self._watchdog.bounding(db), db.transaction():
                        _durable(db)
                        self._write_together(group)
                        changes.notify(db, _appended(group))
                        committing = True
                except (_ConflictError, psycopg.errors.IntegrityError, psycopg.DataError):
                    # A batch does not fit the log, or holds what the database cannot store:
                    # each batch in a savepoint of its own then, so that it fails alone.
                    committing = False
                    for pending in group:
                        pending.error = None
                        self._last.pop(pending.batch.combat_id, None)
                    with self._watchdog.bounding(db), db.transaction():
                        _durable(db)
                        for pending in group:
                            try:
                                with db.transaction():  # a savepoint
                                    self._write_batch(pending)
                            except _ConflictError as e:
                                pending.error = _conflict(str(e))
                            except _FencedError:
                                pending.error = _moved(pending.batch.combat_id)
                            except (psycopg.errors.IntegrityError, psycopg.DataError) as e:
                                request = pending.batch.request
                                if (
                                    isinstance(e, psycopg.errors.UniqueViolation)
                                    and e.diag.constraint_name == "requests_pkey"
                                    and request is not None
                                ):
                                    pending.error = self._repeated(pending.batch, request)
                                else:  # the server's words to the log
                                    pending.error = _error(e, self._location)
                        changes.notify(db, _appended(group))
                        committing = True
                break
            except psycopg.Error as e:
                landed: bool | None = None  # unknown
                lost = isinstance(e, LOST)
                if lost and attempt == 1:
                    landed = self._after_lost_session(group, committing)
                if landed is False:
                    for pending in group:
                        pending.error = None
                    continue  # written again on the new session
                if landed is None:
                    self._unknown_outcome(group, e, sent=committing and lost)
                    return
                log.info("store_commit_found_landed", batches=len(group))
                break
        stored = self._filter
        assert stored is not None  # built before the transaction
        for pending in group:
            if pending.error is not None and pending.error.code == "combat_moved":
                # Not a lease taken again since the batch's state was read: that one holds.
                self._leases.drop(pending.batch.combat_id, pending.batch.epoch)
                self._last.pop(pending.batch.combat_id, None)
            if pending.error is None:
                b = pending.batch
                if b.ruleset is not None:
                    self._leases.hold(b.combat_id, FIRST_EPOCH, sent)
                self._latest_at = max(self._latest_at, b.at)
                self._written += _size(pending)
                if pending.events:
                    self._last[b.combat_id] = b.first_seq + len(pending.events) - 1
                if b.request is not None:
                    self._touched.add(b.request[0])
                    stored.add(b.request)

    def _repeated(self, batch: Batch, request: tuple[str, str]) -> StoreError:
        """The refusal of a batch whose request id the database holds already: a retry of a
        command answered before, logged as such (not as a store error: a storm of retries
        after a failover is no fault). Alone, the daemon looked the id up first and its filter
        knew every id it stored, so another daemon stored this one, unseen by the renewals:
        the filter no longer rules ids out."""
        self._leases.shared("a request id stored by another daemon")
        log.info("store_request_repeated", combat=batch.combat_id, request=request[1])
        return _conflict(_request_taken(request))

    def _after_lost_session(self, group: Sequence[_Pending], committing: bool) -> bool | None:
        """Whether the group's transaction was committed, once its session was lost (the
        server restarted, the network failed), read on a new session: before COMMIT was sent
        nothing of it was kept; after it, what it wrote is looked for (``_landed``). A server
        restarting refuses sessions for a
        moment: after COMMIT, a new one is tried again for up to ``LANDED_WAIT`` seconds, and
        None (unknown) returned if none could be had."""
        deadline = time.monotonic() + (LANDED_WAIT if committing else 0.0)
        pause = LANDED_FIRST_PAUSE
        while True:
            try:
                self._reconnect()
                return self._landed(group) if committing else False
            except psycopg.Error as e:
                log.warning(
                    "store_unreachable",
                    store=shown(self._location),
                    reason=_reason(e, self._location),
                )
            if time.monotonic() + pause > deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, LANDED_MAX_PAUSE)

    def _unknown_outcome(self, group: Sequence[_Pending], e: psycopg.Error, *, sent: bool) -> None:
        """Fail the group with ``e``. When its COMMIT was ``sent`` the transaction may have
        been committed: its request ids go in the filter, so that a retry looks for them in
        the database (and finds the first answer if it was kept), and its combats' last seqs
        are forgotten, so that their next appends are checked against the database."""
        error = _error(e, self._location)
        if sent:
            error = StoreError(
                "store_unavailable",
                "the store could not be reached to learn whether this command was kept:"
                " retry it with the same request_id",
            )
            log.error(
                "store_commit_outcome_unknown",
                batches=len(group),
                reason=_reason(e, self._location),
            )
        for pending in group:
            pending.error = error
            b = pending.batch
            self._last.pop(b.combat_id, None)
            if sent and b.request is not None and self._filter is not None:
                self._filter.add(b.request)

    def _landed(self, group: Sequence[_Pending]) -> bool | None:
        """Whether the group's transaction, whose COMMIT was sent when its session was lost,
        was committed: read (on the new session) from the last event of one batch it appended,
        or the row of a combat it created, compared with what the batch wrote. Not from the
        combat's last seq alone: another daemon may have acquired the combat meanwhile and
        appended events of its own at those seqs. None when no batch of it did either (a
        snapshot alone)."""
        for pending in group:
            b = pending.batch
            if pending.error is not None:
                continue
            if pending.events:
                combat_id, seq, body = pending.events[-1]
                row = self._writer.execute(
                    f"SELECT body FROM {SCHEMA}.events WHERE combat_id = %s AND seq = %s",
                    (combat_id, seq),
                ).fetchone()
                return row is not None and bytes(row[0]) == body
            if b.ruleset is not None:
                row = self._writer.execute(
                    f"SELECT created_at FROM {SCHEMA}.combats WHERE combat_id = %s",
                    (b.combat_id,),
                ).fetchone()
                return row is not None and row[0] == b.at  # not another daemon's of that id
        if all(pending.error is not None for pending in group):
            return True  # every batch was refused: the transaction wrote nothing
        return None

    def _encode_snapshot(self, pending: _Pending) -> None:
        make = pending.batch.snapshot
        if make is None:
            return
        try:
            pending.snapshot = _pack(make())
        except Exception:
            log.exception("snapshot_not_encoded", combat=pending.batch.combat_id)

    def _over_quota(self, group: Sequence[_Pending]) -> StoreError | None:
        """``store_full`` if the group would take the store past its quota (committer's
        thread): the size last measured, plus what was written since, plus the group's own
        bytes. Measured again every ``QUOTA_MEASURE_BYTES``, and before any refusal, so a
        refusal is never of an estimate alone."""
        if self._max_bytes is None:
            return None
        adding = sum(_size(p) for p in group)
        for fresh in (False, True):
            if fresh or self._measured is None or self._written >= QUOTA_MEASURE_BYTES:
                self._measured, self._written = self._size(), 0
            if self._measured + self._written + adding <= self._max_bytes:
                return None
            if fresh:
                break
        return StoreError(
            "store_full",
            "the store at {store} would pass its quota of {quota} bytes",
            store=shown(self._location),
            quota=self._max_bytes,
        )

    def _size(self) -> int:
        row = self._writer.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _build_filter(self) -> _Filter:
        built = _Filter()
        # A named (server-side) cursor, which needs a transaction: the ids come a page at a
        # time, not all in memory at once.
        with self._writer.transaction(), self._writer.cursor(name="turnkeeper_filter") as rows:
            rows.itersize = FILTER_PAGE  # a round trip per page: psycopg's 100 would be 1,000
            rows.execute(f"SELECT principal, request_id FROM {SCHEMA}.requests")
            for principal, request_id in rows:
                built.add((principal, request_id))
        built.built()
        return built

    def _stored_last(self, combat_id: str) -> int | None:
        row = self._writer.execute(
            f"SELECT last_seq FROM {SCHEMA}.combats WHERE combat_id = %s", (combat_id,)
        ).fetchone()
        if row is None:
            return None
        self._last[combat_id] = row[0]
        return int(row[0])

    def _write_together(self, group: Sequence[_Pending]) -> None:
        """Check each batch against the log as the batches before it leave it, then write the
        rest a statement per table, each combat's write fenced: conditional on the last seq
        expected and on the epoch of this daemon's lease (committer's thread, inside the
        transaction). A batch for a combat whose lease this daemon does not hold is refused
        alone (``combat_moved``). Raises ``_ConflictError`` if a combat's row is not what was
        expected (its log moved, or another daemon acquired it)."""
        starts: dict[str, int] = {}  # each combat's last seq before this group
        epochs: dict[str, int] = {}  # and the epoch of this daemon's lease on it
        ends: dict[str, int] = {}  # and as the group leaves it
        combats: list[tuple[str, str, float, str]] = []
        events: list[tuple[str, int, bytes]] = []
        requests: list[tuple[str, str, str, bytes | None]] = []
        summaries: dict[str, bytes] = {}  # one row per combat: the group's last
        deadlines: dict[str, float | None] = {}  # and the deadline its summary gives
        snapshots: dict[str, tuple[int, bytes]] = {}
        last: int | None
        for pending in group:
            b = pending.batch
            if b.combat_id in ends:
                last = ends[b.combat_id]
            elif b.combat_id in self._last:
                last = self._last[b.combat_id]
            else:
                last = self._stored_last(b.combat_id)
            if b.ruleset is not None:
                if last is not None:
                    # Made by another daemon unseen (this one's registry refuses its own).
                    self._leases.shared("a combat made by another daemon")
                    pending.error = _conflict(f"combat {b.combat_id!r} exists")
                    continue
                last = 0
            elif last is None:
                pending.error = _conflict(f"combat {b.combat_id!r} does not exist")
                continue
            if b.combat_id not in epochs:
                # A combat made here is this daemon's from its first row.
                epoch = FIRST_EPOCH if b.ruleset is not None else self._leases.epoch(b.combat_id)
                if epoch is None:
                    pending.error = _moved(b.combat_id)
                    continue
                epochs[b.combat_id] = epoch
            if b.epoch is not None and b.epoch != epochs[b.combat_id]:
                # Decided on a state read under an older lease: the combat went to another
                # daemon and came back since, and its log may have grown meanwhile.
                pending.error = _moved(b.combat_id)
                continue
            if (pending.events or pending.snapshot is not None) and b.first_seq != last + 1:
                # Judged by the database itself, batch by batch (``_write_batch``): the last
                # seq remembered may be behind the log (a commit that finished as a pause
                # cost this daemon the combat and an acquire took it back, forgetting it first).
                raise _ConflictError(
                    f"combat {b.combat_id!r} is at seq {last}, batch starts at {b.first_seq}"
                )
            if b.ruleset is not None:
                combats.append((b.combat_id, b.ruleset, b.at, b.table))
            starts.setdefault(b.combat_id, last)
            ends[b.combat_id] = last + len(pending.events)
            events.extend(pending.events)
            if b.request is not None:
                requests.append((*b.request, b.combat_id, pending.response))
            if pending.summary is not None:
                summaries[b.combat_id] = pending.summary
                deadlines[b.combat_id] = _deadline(b.summary)
            if pending.snapshot is not None:
                snapshots[b.combat_id] = (last + len(pending.events), pending.snapshot)
        db = self._writer
        if combats:
            ids, rulesets, ats, tables = zip(*combats, strict=True)
            db.execute(
                f"INSERT INTO {SCHEMA}.combats"
                " (combat_id, ruleset, created_at, table_id, owner, owner_epoch)"
                " SELECT u.*, %s, %s"
                " FROM unnest(%s::text[], %s::text[], %s::float8[], %s::text[]) AS u",
                (
                    self.daemon_id,
                    FIRST_EPOCH,
                    list(ids),
                    list(rulesets),
                    list(ats),
                    list(tables),
                ),
            )
        if ends:
            touched = list(ends)
            # The fence: each combat is where this committer left it, and still leased by
            # this daemon at the epoch it acquired (every write, events or not, so that a
            # daemon that lost the lease leaves no snapshot, summary or answer either).
            cursor = db.execute(
                f"UPDATE {SCHEMA}.combats c SET last_seq = u.last,"
                " changed = pg_current_xact_id(),"
                " deadline = CASE WHEN u.summed THEN u.deadline ELSE c.deadline END"
                " FROM unnest(%s::text[], %s::int8[], %s::int8[], %s::int8[], %s::bool[],"
                " %s::float8[]) AS u (combat_id, expected, last, epoch, summed, deadline)"
                " WHERE c.combat_id = u.combat_id AND c.last_seq = u.expected"
                " AND c.owner_epoch = u.epoch",
                (
                    touched,
                    [starts[c] for c in touched],
                    [ends[c] for c in touched],
                    [epochs[c] for c in touched],
                    [c in deadlines for c in touched],
                    [deadlines.get(c) for c in touched],
                ),
            )
            if cursor.rowcount != len(touched):
                raise _ConflictError("a combat's log or lease moved under the committer")
        with db.cursor() as cur:
            if events:
                with cur.copy(
                    f"COPY {SCHEMA}.events (combat_id, seq, body) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["text", "int8", "bytea"])
                    for row in events:
                        copy.write_row(row)
            if requests:
                with cur.copy(  # stamped by the server (``at``'s default)
                    f"COPY {SCHEMA}.requests (principal, request_id, combat_id, response)"
                    " FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["text", "text", "text", "bytea"])
                    for request in requests:
                        copy.write_row(request)
        if summaries:
            db.execute(
                f"INSERT INTO {SCHEMA}.summaries (combat_id, body)"
                " SELECT * FROM unnest(%s::text[], %s::bytea[])"
                " ON CONFLICT (combat_id) DO UPDATE SET body = excluded.body",
                (list(summaries), list(summaries.values())),
            )
        if snapshots:
            db.execute(
                f"INSERT INTO {SCHEMA}.snapshots (combat_id, seq, body)"
                " SELECT * FROM unnest(%s::text[], %s::int8[], %s::bytea[])"
                " ON CONFLICT (combat_id) DO UPDATE SET seq = excluded.seq, body = excluded.body",
                (
                    list(snapshots),
                    [seq for seq, _ in snapshots.values()],
                    [body for _, body in snapshots.values()],
                ),
            )

    def _write_batch(self, pending: _Pending) -> None:
        """One batch in its own savepoint, checked against the database itself (its row
        locked, so its last seq and lease stay as read until the transaction ends). Raises
        ``_FencedError`` for a combat whose lease this daemon does not hold."""
        db = self._writer
        b = pending.batch
        row = db.execute(
            f"SELECT last_seq, owner_epoch FROM {SCHEMA}.combats WHERE combat_id = %s FOR UPDATE",
            (b.combat_id,),
        ).fetchone()
        if b.ruleset is not None:
            if row is not None:
                self._leases.shared("a combat made by another daemon")
                raise _ConflictError(f"combat {b.combat_id!r} exists")
            db.execute(
                f"INSERT INTO {SCHEMA}.combats"
                " (combat_id, ruleset, created_at, table_id, owner, owner_epoch)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (b.combat_id, b.ruleset, b.at, b.table, self.daemon_id, FIRST_EPOCH),
            )
            last = 0
        elif row is None:
            raise _ConflictError(f"combat {b.combat_id!r} does not exist")
        elif row[1] != self._leases.epoch(b.combat_id) or b.epoch not in (None, row[1]):
            raise _FencedError(b.combat_id)
        else:
            last = row[0]
        if (pending.events or pending.snapshot is not None) and b.first_seq != last + 1:
            raise _ConflictError(
                f"combat {b.combat_id!r} is at seq {last}, batch starts at {b.first_seq}"
            )
        with db.cursor() as cur:
            if pending.events:
                cur.executemany(
                    f"INSERT INTO {SCHEMA}.events (combat_id, seq, body) VALUES (%s, %s, %s)",
                    pending.events,
                )
                cur.execute(
                    f"UPDATE {SCHEMA}.combats SET last_seq = %s, changed = pg_current_xact_id()"
                    " WHERE combat_id = %s",
                    (last + len(pending.events), b.combat_id),
                )
            if b.request is not None:
                cur.execute(
                    f"INSERT INTO {SCHEMA}.requests (principal, request_id, combat_id, response)"
                    " VALUES (%s, %s, %s, %s)",
                    (*b.request, b.combat_id, pending.response),
                )
            if pending.summary is not None:
                cur.execute(
                    f"INSERT INTO {SCHEMA}.summaries (combat_id, body) VALUES (%s, %s)"
                    " ON CONFLICT (combat_id) DO UPDATE SET body = excluded.body",
                    (b.combat_id, pending.summary),
                )
                cur.execute(
                    f"UPDATE {SCHEMA}.combats SET deadline = %s WHERE combat_id = %s",
                    (_deadline(b.summary), b.combat_id),
                )
            if pending.snapshot is not None:
                cur.execute(
                    f"INSERT INTO {SCHEMA}.snapshots (combat_id, seq, body) VALUES (%s, %s, %s)"
                    " ON CONFLICT (combat_id) DO UPDATE"
                    " SET seq = excluded.seq, body = excluded.body",
                    (b.combat_id, last + len(pending.events), pending.snapshot),
                )

    def _prune(self) -> None:
        """Forget requests older than REQUEST_MEMORY_SECONDS or past MAX_REMEMBERED_REQUESTS
        (as the SQLite store's ``_prune``); a failed prune is dropped and runs again later.
        Ages are by the server's clock, the one that stamped every daemon's rows: a daemon
        whose own clock runs ahead prunes no other daemon's ids early."""
        db = self._writer
        touched, self._touched = self._touched, set()
        with contextlib.suppress(psycopg.Error), db.transaction():
            db.execute(
                f"DELETE FROM {SCHEMA}.requests WHERE ctid IN (SELECT ctid FROM {SCHEMA}.requests"
                " WHERE at < extract(epoch FROM now())::float8 - %s LIMIT %s)",
                (REQUEST_MEMORY_SECONDS, PRUNE_MAX_ROWS),
            )
            for principal in touched:
                db.execute(
                    f"DELETE FROM {SCHEMA}.requests WHERE ctid IN (SELECT ctid FROM"
                    f" {SCHEMA}.requests WHERE principal = %(p)s AND at <= (SELECT at FROM"
                    f" {SCHEMA}.requests WHERE principal = %(p)s ORDER BY at DESC"
                    " LIMIT 1 OFFSET %(cap)s) LIMIT %(rows)s)",
                    {"p": principal, "cap": MAX_REMEMBERED_REQUESTS, "rows": PRUNE_MAX_ROWS},
                )

    # -- reading ---------------------------------------------------------------------------------

    def _read(self, role: Literal["reader", "loader"], query: Callable[[_Connection], _T]) -> _T:
        """``query`` on the role's session, on a new session if it broke (the server
        restarted, the network failed) before or during the query: a read changes nothing,
        so running it again is safe. Raises ``StoreError`` for a query that failed otherwise,
        or again on the new session."""
        for attempt in (1, 2):
            db: _Connection = getattr(self, f"_{role}")
            try:
                if db.broken or db.closed:
                    db.close()
                    db = _connect(self._location, role, self._leases)
                    setattr(self, f"_{role}", db)
                return query(db)
            except LOST as e:
                # The server ended the session (57P01 on a restart) or it was lost: a new one
                # runs the query again.
                if attempt == 1:
                    db.close()
                    continue
                raise _error(e, self._location) from e
            except psycopg.Error as e:
                raise _error(e, self._location) from e
        raise AssertionError("unreachable")

    def summaries(self) -> list[tuple[str, Any]]:
        """Every combat in creation order with its last summary (None if it has none or the
        summary does not decode)."""
        with self._reading:
            rows = self._read(
                "reader",
                lambda db: db.execute(
                    f"SELECT c.combat_id, s.body FROM {SCHEMA}.combats c"
                    f" LEFT JOIN {SCHEMA}.summaries s USING (combat_id) ORDER BY c.position"
                ).fetchall(),
            )
        result: list[tuple[str, Any]] = []
        for combat_id, body in rows:
            try:
                result.append((combat_id, None if body is None else _unpack(body)))
            except ValueError:
                result.append((combat_id, None))
        return result

    def memberships(self) -> dict[str, str]:
        """The table of every combat not of the default table, by combat id."""
        with self._reading:
            rows = self._read(
                "reader",
                lambda db: db.execute(
                    f"SELECT combat_id, table_id FROM {SCHEMA}.combats WHERE table_id <> %s",
                    (DEFAULT_TABLE,),
                ).fetchall(),
            )
        return dict(rows)

    def load_one(self, combat_id: str) -> LoadedCombat:
        """One combat as found at start-up, with its snapshot (from any thread).

        A gap anywhere in its log quarantines it, and so does a log shorter than the combat's
        own last seq (events lost at the end): found by counting, so no event body is read.
        The combat's lease is acquired first (``acquire``) unless held: what is read then is
        the whole log, which no other daemon can append to until this one lets it go. Raises
        ``StoreError("store_failed")`` for a combat the store does not hold, and
        ``StoreError("store_unavailable")`` if another daemon keeps its lease, and
        ``StoreError("combat_moved")`` if the lease was lost as soon as it was acquired (a
        pause past it). The combat comes with the epoch it was read under (``Batch.epoch``):
        taken before the read, so that a log another daemon appended to meanwhile is never
        served under a lease taken after it."""
        self.acquire(combat_id)
        epoch = self._leases.epoch(combat_id)
        with self._loading:
            loaded = self._read("loader", partial(self._load_combat, combat_id))
        if epoch is None:
            raise _moved(combat_id)
        return replace(loaded, epoch=epoch)

    def read_one(self, combat_id: str) -> LoadedCombat:
        """``load_one`` without acquiring the combat's lease: the log as it stands, which
        its holder may append to meanwhile (a combat followed here; any thread)."""
        with self._loading:
            return self._read("loader", partial(self._load_combat, combat_id))

    def changed_since(
        self, watermark: int, after: str, count: int
    ) -> tuple[int, list[tuple[str, int, str, int]]]:
        """Up to ``count`` combats whose log grew (or that were made) in a transaction whose
        id is ``watermark`` or more, ordered by it then by id, past ``after`` among those of
        ``watermark`` itself: each with its last seq, table and that transaction's id (any
        thread). With them, the
        watermark to ask from next: the oldest transaction still running as they were read,
        every one before it ended, so that a combat changed since and not among them is
        found from it (one changed at the watermark or later is found again, harmlessly).
        Pages on with the last combat's (``changed``, id); the watermark of the first page
        is the one to keep. Its cost is the rows found, by the ``combats_changed`` index,
        whatever the number of combats."""
        with self._loading:
            rows = self._read(
                "loader",
                lambda db: db.execute(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, c.*"
                    " FROM (SELECT 1) AS one LEFT JOIN LATERAL ("
                    f"SELECT combat_id, last_seq, table_id, changed::text FROM {SCHEMA}.combats"
                    ' WHERE (changed, combat_id COLLATE "C") > (%s::xid8, %s)'
                    ' ORDER BY changed, combat_id COLLATE "C" LIMIT %s) AS c ON true',
                    (str(watermark), after, count),
                ).fetchall(),
            )
        horizon = int(rows[0][0])
        return horizon, [
            (str(c), int(s), str(t), int(x)) for _, c, s, t, x in rows if c is not None
        ]

    def horizon(self) -> int:
        """The oldest transaction still running (any thread): a combat whose change is not
        committed yet is changed at it or later (``changed_since``)."""
        with self._loading:
            (row,) = self._read(
                "loader",
                lambda db: db.execute(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"
                ).fetchall(),
            )
        return int(row[0])

    async def follow_changes(
        self,
        woken: Callable[[changes.Changes | None], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hand ``woken`` the combats whose logs grew, as any daemon's commits tell them (None
        after the listener's session was lost: some may have gone untold), until cancelled;
        started once it listens."""
        listener = changes.Listener(
            partial(_connect, self._location, "listener"), partial(_reason, location=self._location)
        )
        await listener.run(woken, task_status=task_status)

    @staticmethod
    def _load_combat(combat_id: str, db: _Connection) -> LoadedCombat:
        with db.transaction():
            # One snapshot of the database for the combat row, its snapshot and its log.
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            row = db.execute(
                f"SELECT ruleset, created_at, last_seq FROM {SCHEMA}.combats WHERE combat_id = %s",
                (combat_id,),
            ).fetchone()
            if row is None:
                raise StoreError("store_failed", "no combat {id!r} in the store", id=combat_id)
            ruleset, created_at, last_seq = row
            stored = db.execute(
                f"SELECT seq, body FROM {SCHEMA}.snapshots WHERE combat_id = %s", (combat_id,)
            ).fetchone()
            counted = db.execute(
                f"SELECT count(*), coalesce(min(seq), 1), coalesce(max(seq), 0)"
                f" FROM {SCHEMA}.events WHERE combat_id = %s",
                (combat_id,),
            ).fetchone()
            assert counted is not None
            count, first, last = counted

            def quarantined(reason: str) -> LoadedCombat:
                return LoadedCombat(combat_id, ruleset, created_at, None, 0, quarantined=reason)

            if count != last or first != 1:
                expected = 1
                seq = 0
                for (seq,) in db.execute(
                    f"SELECT seq FROM {SCHEMA}.events WHERE combat_id = %s ORDER BY seq",
                    (combat_id,),
                ):
                    if seq != expected:
                        break
                    expected += 1
                return quarantined(f"seq {expected} is missing (next stored is {seq})")
        if stored is not None and stored[0] > last:
            return quarantined(f"seq {last + 1} is missing (the snapshot is at seq {stored[0]})")
        if last_seq > last:
            return quarantined(f"seq {last + 1} is missing (the log should end at seq {last_seq})")
        if last_seq < last:
            # Events past the seq the combat's appends recorded: not written by this store's
            # conditional appends, so the log is not what they left.
            return quarantined(f"the log ends at seq {last}, past its combat's last seq {last_seq}")
        snapshot: tuple[int, Any] | None = None
        warnings: list[str] = []
        if stored is not None:
            try:
                snapshot = (stored[0], _unpack(stored[1]))
            except ValueError as e:
                warnings.append(
                    f"combat {combat_id}: snapshot at seq {stored[0]} is unreadable ({e}),"
                    " loaded from the whole log"
                )
        return LoadedCombat(combat_id, ruleset, created_at, snapshot, last, warnings)

    def replay(self, combat_id: str, after: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """The combat's events after ``after``, decoded, in order, MAX_EVENTS_PER_READ at a
        time (from any thread). Raises ``StoreError("store_failed")`` naming the seq of an
        event that does not decode or is missing."""
        expected = after + 1
        while True:
            with self._loading:
                rows = self._read("loader", partial(_page, combat_id, expected - 1))
            for seq, body in rows:
                if seq != expected:
                    raise StoreError(
                        "store_failed",
                        "seq {seq} is missing (next stored is {next})",
                        seq=expected,
                        next=seq,
                    )
                yield seq, _event(seq, body)
                expected += 1
            if len(rows) < MAX_EVENTS_PER_READ:
                return

    async def events_after(
        self, combat_id: str, seq: int, limit: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``limit`` (at most MAX_EVENTS_PER_READ) events of the combat after ``seq``,
        read in a worker thread: the event loop never waits for the server. Raises
        ``StoreError("store_failed")`` if a stored event does not decode, and
        ``StoreError("store_unavailable")`` if the server cannot be reached or does not answer
        within ``READ_TIMEOUT`` (the thread is left to finish on its own)."""
        count = max(0, min(limit, MAX_EVENTS_PER_READ))
        rows: list[tuple[int, bytes]] | None = None
        with anyio.move_on_after(READ_TIMEOUT):
            rows = await anyio.to_thread.run_sync(
                self._events, combat_id, seq, count, abandon_on_cancel=True
            )
        if rows is None:
            log.warning("store_read_timed_out", store=shown(self._location), combat=combat_id)
            raise StoreError(
                "store_unavailable", "the database server could not be reached: retry later"
            )
        return [(s, _event(s, body)) for s, body in rows]

    def _events(self, combat_id: str, seq: int, count: int) -> list[tuple[int, bytes]]:
        # One read at a time on the reader's session; a read still stuck on it (the server
        # stopped answering) makes the next ones give up rather than queue behind it.
        if not self._reading.acquire(timeout=READ_TIMEOUT):
            raise StoreError(
                "store_unavailable", "the database server could not be reached: retry later"
            )
        try:
            return self._read("reader", lambda db: _page(combat_id, seq, db, count))
        finally:
            self._reading.release()

    async def combat_page(
        self, after: str | None, count: int, tables: frozenset[str] | None
    ) -> list[ListedCombat]:
        """Up to ``count`` combats of ``tables`` (None: every table) whose ids sort after
        ``after`` (all with None), in the code-point order of their ids (``COLLATE "C"``
        compares UTF-8 bytes, which sort as code points do, as ``Combats.page`` sorts), each
        with its last seq and summary: one query, in a worker thread, given up after
        ``READ_TIMEOUT`` as ``events_after`` is."""
        rows: list[tuple[str, str, str, int, bytes | None]] | None = None
        with anyio.move_on_after(READ_TIMEOUT):
            rows = await anyio.to_thread.run_sync(
                self._combat_page, after or "", count, tables, abandon_on_cancel=True
            )
        if rows is None:
            log.warning("store_read_timed_out", store=shown(self._location))
            raise StoreError(
                "store_unavailable", "the database server could not be reached: retry later"
            )
        listed = []
        for combat_id, table, ruleset, seq, body in rows:
            try:
                stored = None if body is None else _unpack(body)
            except ValueError:
                stored = None
            listed.append(ListedCombat(combat_id, table, ruleset, int(seq), stored))
        return listed

    def _combat_page(
        self, after: str, count: int, tables: frozenset[str] | None
    ) -> list[tuple[str, str, str, int, bytes | None]]:
        # Every id is at least one character, so all sort after "".
        where = 'c.combat_id COLLATE "C" > %(after)s'
        if tables is not None:
            where += " AND c.table_id = ANY(%(tables)s::text[])"
        query = (
            f"SELECT c.combat_id, c.table_id, c.ruleset, c.last_seq, s.body"
            f" FROM {SCHEMA}.combats c LEFT JOIN {SCHEMA}.summaries s USING (combat_id)"
            f' WHERE {where} ORDER BY c.combat_id COLLATE "C" LIMIT %(count)s'
        )
        params = {"after": after, "tables": sorted(tables or ()), "count": count}
        if not self._reading.acquire(timeout=READ_TIMEOUT):  # as ``_events``
            raise StoreError(
                "store_unavailable", "the database server could not be reached: retry later"
            )
        try:
            return self._read("reader", lambda db: db.execute(query, params).fetchall())
        finally:
            self._reading.release()

    @property
    def alone(self) -> bool:
        """Whether no other daemon has used the database since this one started, as far as
        its renewals and commits have seen (once false, never true again)."""
        return self._leases.alone

    def recent_request(self, principal: str, request_id: str) -> tuple[str, Any] | None:
        """The answer this daemon gave lately to a request id, from memory, or None: no read,
        so None does not say that no daemon stored the id (see ``SharedStore``)."""
        found = self._recent.get(principal, request_id)
        if found is None or found[2] < self._latest_at - REQUEST_MEMORY_SECONDS:
            return None
        return self._answer(principal, request_id, found)

    async def lookup_request(self, principal: str, request_id: str) -> tuple[str, Any] | None:
        """The combat id and response remembered for a retried request, or None if forgotten:
        from memory when recent, ruled out by the filter when never stored (only while this
        daemon is alone on the database: the filter knows no id another daemon stored), else
        read from the database in a worker thread. An id another daemon stored in the moment
        before this one heard of it is still never applied twice: its commit would store the
        id again, which the database refuses (``conflict``)."""
        found = self._recent.get(principal, request_id)
        if found is not None and found[2] < self._latest_at - REQUEST_MEMORY_SECONDS:
            found = None
        if found is None:
            known = self._filter
            if self._leases.alone and known is not None and not known.maybe(principal, request_id):
                return None
            found = await anyio.to_thread.run_sync(self._stored_request, principal, request_id)
            if found is None:
                return None
        return self._answer(principal, request_id, found)

    @staticmethod
    def _answer(
        principal: str, request_id: str, found: tuple[str, bytes, float]
    ) -> tuple[str, Any]:
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
        with self._loading:
            row = self._read(
                "loader",
                lambda db: db.execute(
                    f"SELECT combat_id, response, at FROM {SCHEMA}.requests"
                    " WHERE principal = %s AND request_id = %s",
                    (principal, request_id),
                ).fetchone(),
            )
        return None if row is None else (row[0], row[1], row[2])


class _Watchdog:
    """Severs the committer's socket when a write transaction is not over within
    ``WRITE_TIMEOUT``: a server that stopped answering (its backend hung, its host frozen)
    keeps the socket open and acknowledged, so nothing else would end the committer's wait,
    nor the daemon's drain behind it. The transaction then fails as a lost session does.

    One thread for the store's life, not a timer per transaction: arming it is setting a
    deadline, and the thread is woken only when it had none."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._deadline: float | None = None
        self._db: _Connection | None = None
        self._idle = False  # the thread waits with no deadline: arming must wake it
        self._closed = False
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def bounding(self, db: _Connection) -> Iterator[None]:
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="turnkeeper-watchdog", daemon=True
                )
                self._thread.start()
            self._deadline, self._db = time.monotonic() + WRITE_TIMEOUT, db
            if self._idle:
                self._ready.notify()
        try:
            yield
        finally:
            with self._ready:
                self._deadline = self._db = None

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()

    def _watch(self) -> None:
        while True:
            with self._ready:
                if self._closed:
                    return
                if self._deadline is None:
                    self._idle = True
                    self._ready.wait()
                    self._idle = False
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._ready.wait(left)  # a later deadline is found when this one is up
                    continue
                db, self._deadline, self._db = self._db, None, None
            if db is not None:
                with contextlib.suppress(OSError, psycopg.Error):
                    socket.socket(fileno=os.dup(db.pgconn.socket)).shutdown(socket.SHUT_RDWR)
                log.error("store_write_timed_out", seconds=WRITE_TIMEOUT)


def _durable(db: _Connection) -> None:
    """Make the transaction just begun on ``db`` commit only once flushed, whatever the
    server's, the database's or the role's default: per transaction, so that nothing done to
    the session in between (a ``RESET ALL``) can undo it."""
    db.execute("SET LOCAL synchronous_commit = on")


_TAKEABLE = (
    "(owner = %(me)s OR CASE WHEN owner IS NULL"
    " THEN wanted_by IS NULL OR wanted_by = %(me)s"
    " OR wanted_at + %(wanted)s * interval '1 second' <= now()"
    f" ELSE NOT EXISTS (SELECT 1 FROM {SCHEMA}.daemons d WHERE d.daemon_id = owner"
    " AND d.heartbeat + d.lease_seconds * interval '1 second' > now()) END)"
)
"""Whether daemon ``me`` may take a combat's lease: its own, free (and not kept for another
daemon that asked for it), or run out (its owner's heartbeat older than the owner's lease, or
the owner gone from ``daemons``), by the server's clock."""


def _try_acquire(
    combat_id: str, daemon_id: str, db: _Connection
) -> tuple[bool, str | None, int | None, int | None]:
    """Take the combat's lease if it is free, run out (its owner's heartbeat is older than the
    owner's lease, or the owner is gone from ``daemons``) or ``daemon_id``'s own: (whether the
    combat exists, its holder and the holder's epoch as the statement began, the new epoch if
    taken). Not taken, a holder of None means one that let go meanwhile: tried again.

    One statement in autocommit, so no transaction of the acquire's stays open across a
    round trip. A row locked by another session is waited for ``ACQUIRE_LOCK_WAIT`` at most:
    a daemon whose lease has run out while it holds it (paused in the middle of a commit) has
    its sessions ended, which rolls that transaction back, and the next try takes it."""
    db.execute(f"SET lock_timeout = '{ACQUIRE_LOCK_WAIT}'")
    try:
        row = db.execute(
            f"WITH took AS (UPDATE {SCHEMA}.combats c"
            " SET owner = %(me)s, owner_epoch = owner_epoch + 1, wanted_by = NULL"
            f" WHERE combat_id = %(id)s AND {_TAKEABLE} RETURNING owner_epoch)"
            f" SELECT (SELECT owner_epoch FROM took), owner, owner_epoch FROM {SCHEMA}.combats"
            " WHERE combat_id = %(id)s",
            {"me": daemon_id, "id": combat_id, "wanted": WANTED_FOR},
        ).fetchone()
    except psycopg.errors.LockNotAvailable:
        _end_sessions(combat_id, db)
        return True, None, None, None
    finally:
        db.execute("RESET lock_timeout")
    if row is None:
        return False, None, None, None
    epoch, holder, held = row
    return True, holder, int(held), None if epoch is None else int(epoch)


def _end_sessions(combat_id: str, db: _Connection) -> None:
    """End every session of every daemon whose lease has run out (its heartbeat older than
    its lease): one of them holds the combat's row in a transaction it cannot finish (paused,
    partitioned), the owner in the middle of a commit or any other daemon, and ending the
    session rolls that back. A role that may not end another's session waits for the
    holder to come back instead."""
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        ended = db.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))"
            f" FROM pg_stat_activity a JOIN {SCHEMA}.daemons d"
            " ON a.application_name LIKE 'turnkeeper % ' || d.daemon_id || ' %'"
            " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
            " AND d.heartbeat + d.lease_seconds * interval '1 second' <= now()",
        ).fetchone()
        if ended is not None and ended[0]:
            log.warning("lease_holder_ended", combat=combat_id, sessions=ended[0])


def _ask_release(holder: str, combat_id: str, asker: str, epoch: int, db: _Connection) -> None:
    """Ask the daemon ``holder`` to let the combat go to ``asker`` (heard by its ``_Leases``
    thread), the lease of ``epoch`` it holds: ``asker/epoch:combat_id`` (``_request``)."""
    payload = f"{asker}/{epoch}:{combat_id}"
    db.execute("SELECT pg_notify(%s, %s)", (f"turnkeeper_release_{holder}", payload))


def _request(payload: str) -> tuple[str, int | None, str]:
    """A request ``_ask_release`` sent: (the asker, the epoch it is about, the combat). A daemon
    id has neither a colon nor a slash. A daemon before requests named the epoch sent
    ``asker:combat_id`` (None); one of those hearing this format takes ``asker/epoch`` for the
    asker, and so keeps the lease for nobody: the asker takes it once ``WANTED_FOR`` is over."""
    who, _, combat_id = payload.partition(":")
    asker, _, about = who.partition("/")
    return asker, int(about) if about.isdigit() else None, combat_id


def _deadline(summary: Any) -> float | None:
    """The next deadline a combat's summary gives (``turnkeeper.combats.combat.summary``)."""
    found = summary.get("deadline") if isinstance(summary, dict) else None
    return float(found) if isinstance(found, int | float) else None


def _page(
    combat_id: str, after: int, db: _Connection, limit: int = MAX_EVENTS_PER_READ
) -> list[tuple[int, bytes]]:
    """Up to ``limit`` of the combat's events after ``after``, as stored: (seq, body)."""
    return db.execute(
        f"SELECT seq, body FROM {SCHEMA}.events WHERE combat_id = %s AND seq > %s"
        " ORDER BY seq LIMIT %s",
        (combat_id, after, limit),
    ).fetchall()


def _appended(group: Sequence[_Pending]) -> list[tuple[str, int, str]]:
    """Each combat the group appended to with its new last seq and its table
    (``changes.notify``)."""
    return [
        (p.batch.combat_id, p.batch.first_seq + len(p.events) - 1, p.batch.table)
        for p in group
        if p.error is None and p.events
    ]


def _size(pending: _Pending) -> int:
    """The bytes a batch adds, as the quota counts them between two measures."""
    size = sum(len(body) for _, _, body in pending.events)
    for extra in (pending.response, pending.summary, pending.snapshot):
        if extra is not None:
            size += len(extra)
    return size


def _event(seq: int, body: object) -> dict[str, Any]:
    try:
        return _unpack_event(body)
    except ValueError as e:
        raise StoreError(
            "store_failed", "event {seq} is unreadable: {reason}", seq=seq, reason=str(e)
        ) from e


__all__ = [
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "PostgresStore",
    "migrate",
    "shown",
]
