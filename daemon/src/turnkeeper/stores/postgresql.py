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

Room for many daemons on one database (issue 12, part 3): each combat row holds its last seq
and an owner epoch, and every append is conditional on the last seq the committer expected
(``_write_together``), so a fenced append only has to add the epoch to that condition. Until
then one daemon holds the database, by a session advisory lock (``STORE_LOCK``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

import anyio
import msgpack  # type: ignore[import-untyped]
import psycopg
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from psycopg import conninfo

from ..store import (
    COMMIT_QUEUE,
    DEFAULT_TABLE,
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
    _unpack,
    _unpack_event,
)

log = structlog.get_logger("turnkeeper.store")

_T = TypeVar("_T")
_Connection = psycopg.Connection[Any]

SCHEMA = "turnkeeper"
"""The PostgreSQL schema holding the store's tables, so that a database shared with other
applications keeps them apart."""

STORE_LOCK = 0x746B_5354_4F52_4531
"""The session advisory lock held by the one daemon writing the database: two daemons would
each number a combat's events from their own memory (part 3 replaces it with a lease per
combat)."""

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

RELOCK_WAIT = 5.0
"""Seconds a new committer's session waits for the lock after the last one was lost: the
server ends a lost session (and frees its lock) once it notices, which a terminated or restarted
one does at once. A session still alive after this is another daemon's, or a partitioned one's."""

OPEN_WAIT = 1.0
"""Seconds ``open`` and ``migrate`` wait for the lock: a daemon that has just closed its session
frees the lock only once the server has ended that session, a moment later, and a daemon
restarted right after a stop must not be refused for that moment."""

RELOCK_POLL = 0.05
"""Seconds between two tries for the lock while waiting for it."""

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
)
"""Every schema version, oldest first. A released migration never changes: a new one is added."""


SCHEMA_VERSION = MIGRATIONS[-1].version


class StoreTakenError(Exception):
    """Another daemon held the store while this one's committer was away (its session lost):
    what this daemon holds in memory may be stale, so it stops rather than write on."""


class _ConflictError(Exception):
    """A batch (or a group's conditional append) that does not fit the log."""


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


def _connect(location: str, role: str) -> psycopg.Connection[Any]:
    """A connection in autocommit mode (transactions are explicit), named for
    ``pg_stat_activity`` so that an operator, and a refused second daemon, can tell whose it is.

    Bounded every way a session can hang: keepalives and ``tcp_user_timeout`` find a server
    or network gone silent, ``statement_timeout`` a statement the server never finishes (the
    location's own settings win where it gives them)."""
    return psycopg.connect(
        location,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        application_name=f"turnkeeper {role} pid {os.getpid()} on {socket.gethostname()}",
        **{**SESSION_BOUNDS, **conninfo.conninfo_to_dict(location)},
    )


def migrate(location: str) -> list[Migration]:
    """Bring the database at ``location`` to this daemon's schema; return what was applied.

    Raises ``StoreError("store_failed")`` if the server cannot be reached, a migration fails
    (then none of this call's is kept: they run in one transaction), or the database is at a
    newer version than this daemon knows (never guessed at)."""
    try:
        with _connect(location, "migrate") as db:
            # Never under a running daemon: it holds the store lock (taken, or refused naming
            # the daemon that holds it; ended with the session).
            _lock(db, location, wait=OPEN_WAIT)
            return _migrate(db, location)
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
    """Migrate on ``db``, whose session holds ``STORE_LOCK``. A database at this daemon's
    version is only read: a role without the right to create (a least-privilege one) runs
    an up-to-date store."""
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
        db.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        version = _version(db)  # again, in the transaction
        for migration in MIGRATIONS:
            if migration.version > version:
                db.execute(migration.sql.encode())
                db.execute(
                    f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration)
    for migration in applied:
        log.info("store_migrated", version=migration.version, name=migration.name)
    return applied


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
    if isinstance(e, psycopg.OperationalError):
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
    ) -> None:
        self._location = location
        self._dir_lock = dir_lock  # the data directory's (``claim_data_dir``): held until close
        self._writer = writer  # the committer's; holds STORE_LOCK
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
        self._generation = 0  # the store lock's, as this daemon last took it (``_bump``)

    @classmethod
    def open(
        cls, location: str, *, max_bytes: int | None = None, dir_lock: int | None = None
    ) -> PostgresStore:
        """Open the store at ``location`` (a libpq URI or conninfo), migrating it to this
        daemon's schema first, for this daemon alone. ``dir_lock``, the data directory's lock
        (``turnkeeper.store.claim_data_dir``), is released by ``close``.

        ``max_bytes`` is an operator's quota on the store's size in the database: its tables,
        indexes and TOAST as ``pg_total_relation_size`` counts them (not the server's WAL,
        nor other databases). Past it every commit fails with ``store_full``. Raises
        ``StoreError("store_failed")`` if the server cannot be reached, the schema is newer
        than this daemon, or another daemon holds the store (the message names its session).
        """
        connections: list[psycopg.Connection[Any]] = []
        try:
            writer = _connect(location, "committer")
            connections.append(writer)
            _lock(writer, location, wait=OPEN_WAIT)  # first: no migration under another daemon
            _migrate(writer, location)
            generation = _bump(writer)
            for role in ("reader", "loader"):
                connections.append(_connect(location, role))
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
        store = cls(location, writer, connections[1], connections[2], max_bytes, dir_lock)
        store._generation = generation
        return store

    def close(self) -> None:
        """Close the connections (the lock goes with the committer's). Call after ``run``."""
        self._committer.close()
        self._committer.join()
        self._watchdog.close()
        self._send.close()
        self._receive.close()
        for db in (self._reader, self._loader, self._writer):
            db.close()
        if self._dir_lock is not None:
            os.close(self._dir_lock)
            self._dir_lock = None

    # -- writing ---------------------------------------------------------------------------------

    async def commit(self, batch: Batch) -> None:
        """Make ``batch`` durable; return only once it is committed. Errors as
        ``turnkeeper.store.Store.commit``'s: ``conflict`` for this batch alone, ``store_full``
        or ``store_failed`` for its whole transaction (nothing of it kept)."""
        pack = self._packer.pack
        pending = _Pending(
            batch,
            [(batch.combat_id, batch.first_seq + i, pack(e)) for i, e in enumerate(batch.events)],
            None if batch.request is None else pack(batch.response),
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
                except StoreTakenError:
                    # Whether the group landed before the session was lost is unknown.
                    for pending in group:
                        pending.error = StoreError(
                            "store_unavailable",
                            "the store could not be reached to learn whether this command was"
                            " kept: retry it with the same request_id",
                        )
                    raise
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
        """A new committer's connection, with the lock, after the last one broke (the server
        restarted, the network failed): the last seqs remembered may be wrong now, since
        whether the failed transaction reached the server is unknown."""
        self._writer.close()
        self._last.clear()
        writer = _connect(self._location, "committer")
        try:
            # The lost session may still be on its way out, holding the lock a moment more.
            _lock(writer, self._location, wait=RELOCK_WAIT)
            found = _generation(writer)
        except BaseException:
            writer.close()
            raise
        if found != self._generation:
            writer.close()
            log.error(
                "store_taken_over",
                store=shown(self._location),
                detail="another daemon held the store while this one's session was lost;"
                " this daemon stops: restart it",
            )
            raise StoreTakenError(
                f"another daemon held the store at {shown(self._location)} while this one's"
                " session was lost: stopped, restart the daemon"
            )
        self._writer = writer
        log.info("store_reconnected", store=shown(self._location))

    def _write(self, group: Sequence[_Pending]) -> None:
        """One transaction for the whole group (committer's thread), as the SQLite store's:
        batches that do not fit the log refused alone, the rest written a statement per table;
        if the server refuses the group (a request id stored already, a combat whose last seq
        moved), it is written again, each batch in its own savepoint."""
        self.transactions += 1
        for pending in group:  # first: the quota counts the snapshots' bytes too
            self._encode_snapshot(pending)
        for attempt in (1, 2):
            try:
                if self._writer.broken or self._writer.closed:
                    self._reconnect()
                if self._filter is None or self._filter.worn:
                    self._filter = self._build_filter()
                over = self._over_quota(group)
                break
            except psycopg.OperationalError as e:
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
                            except (psycopg.errors.IntegrityError, psycopg.DataError) as e:
                                pending.error = _error(
                                    e, self._location
                                )  # the server's words to the log
                        committing = True
                break
            except psycopg.Error as e:
                landed: bool | None = None  # unknown
                lost = isinstance(e, psycopg.OperationalError)
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
            if pending.error is None:
                b = pending.batch
                self._latest_at = max(self._latest_at, b.at)
                self._written += _size(pending)
                if pending.events:
                    self._last[b.combat_id] = b.first_seq + len(pending.events) - 1
                if b.request is not None:
                    self._touched.add(b.request[0])
                    stored.add(*b.request)

    def _after_lost_session(self, group: Sequence[_Pending], committing: bool) -> bool | None:
        """Whether the group's transaction was committed, once its session was lost (the
        server restarted, the network failed), read on a new session: before COMMIT was sent
        nothing of it was kept; after it, the combat rows tell, since each append moved its
        combat's last seq in the same transaction. A server restarting refuses sessions for a
        moment: after COMMIT, a new one is tried again for up to ``LANDED_WAIT`` seconds, and
        None (unknown) returned if none could be had."""
        deadline = time.monotonic() + (LANDED_WAIT if committing else 0.0)
        pause = LANDED_FIRST_PAUSE
        while True:
            try:
                self._reconnect()
                return self._landed(group) if committing else False
            except StoreError as e:
                log.error("store_reconnect_refused", reason=e.message)
                return None  # another daemon holds the store: waiting would not help
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
                self._filter.add(*b.request)

    def _landed(self, group: Sequence[_Pending]) -> bool | None:
        """Whether the group's transaction, whose COMMIT was sent when its session was lost,
        was committed: read from the combat row of one batch it appended to or created (on
        the new session). None when no batch of it did either (a snapshot alone)."""
        for pending in group:
            b = pending.batch
            if pending.error is not None or not (pending.events or b.ruleset is not None):
                continue
            row = self._writer.execute(
                f"SELECT last_seq FROM {SCHEMA}.combats WHERE combat_id = %s", (b.combat_id,)
            ).fetchone()
            if row is None:
                return False  # the combat it created is not there
            return bool(row[0] >= b.first_seq + len(pending.events) - 1)
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
                built.add(principal, request_id)
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
        rest a statement per table, each combat's append conditional on the last seq expected
        (committer's thread, inside the transaction). Raises ``_ConflictError`` if a combat's
        last seq is not what was expected."""
        starts: dict[str, int] = {}  # each combat's last seq before this group
        ends: dict[str, int | None] = {}  # and as the group leaves it
        combats: list[tuple[str, str, float, str]] = []
        events: list[tuple[str, int, bytes]] = []
        requests: list[tuple[str, str, str, bytes | None, float]] = []
        summaries: dict[str, bytes] = {}  # one row per combat: the group's last
        snapshots: dict[str, tuple[int, bytes]] = {}
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
                    pending.error = _conflict(f"combat {b.combat_id!r} exists")
                    continue
                last = 0
            elif last is None:
                pending.error = _conflict(f"combat {b.combat_id!r} does not exist")
                continue
            if (pending.events or pending.snapshot is not None) and b.first_seq != last + 1:
                pending.error = _conflict(
                    f"combat {b.combat_id!r} is at seq {last}, batch starts at {b.first_seq}"
                )
                continue
            if b.ruleset is not None:
                combats.append((b.combat_id, b.ruleset, b.at, b.table))
            starts.setdefault(b.combat_id, last)
            ends[b.combat_id] = last + len(pending.events)
            events.extend(pending.events)
            if b.request is not None:
                requests.append((*b.request, b.combat_id, pending.response, b.at))
            if pending.summary is not None:
                summaries[b.combat_id] = pending.summary
            if pending.snapshot is not None:
                snapshots[b.combat_id] = (last + len(pending.events), pending.snapshot)
        db = self._writer
        if combats:
            ids, rulesets, ats, tables = zip(*combats, strict=True)
            db.execute(
                f"INSERT INTO {SCHEMA}.combats (combat_id, ruleset, created_at, table_id)"
                " SELECT * FROM unnest(%s::text[], %s::text[], %s::float8[], %s::text[])",
                (list(ids), list(rulesets), list(ats), list(tables)),
            )
        moved = [(c, starts[c], end) for c, end in ends.items() if end != starts[c]]
        if moved:
            ids, expected, lasts = zip(*moved, strict=True)
            # The append's condition: each combat is where this committer left it.
            cursor = db.execute(
                f"UPDATE {SCHEMA}.combats c SET last_seq = u.last"
                " FROM unnest(%s::text[], %s::int8[], %s::int8[]) AS u (combat_id, expected, last)"
                " WHERE c.combat_id = u.combat_id AND c.last_seq = u.expected",
                (list(ids), list(expected), list(lasts)),
            )
            if cursor.rowcount != len(moved):
                raise _ConflictError("a combat's log moved under the committer")
        with db.cursor() as cur:
            if events:
                with cur.copy(
                    f"COPY {SCHEMA}.events (combat_id, seq, body) FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["text", "int8", "bytea"])
                    for row in events:
                        copy.write_row(row)
            if requests:
                with cur.copy(
                    f"COPY {SCHEMA}.requests (principal, request_id, combat_id, response, at)"
                    " FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["text", "text", "text", "bytea", "float8"])
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
        """One batch in its own savepoint, checked against the database itself."""
        db = self._writer
        b = pending.batch
        row = db.execute(
            f"SELECT last_seq FROM {SCHEMA}.combats WHERE combat_id = %s FOR UPDATE",
            (b.combat_id,),
        ).fetchone()
        if b.ruleset is not None:
            if row is not None:
                raise _ConflictError(f"combat {b.combat_id!r} exists")
            db.execute(
                f"INSERT INTO {SCHEMA}.combats (combat_id, ruleset, created_at, table_id)"
                " VALUES (%s, %s, %s, %s)",
                (b.combat_id, b.ruleset, b.at, b.table),
            )
            last = 0
        elif row is None:
            raise _ConflictError(f"combat {b.combat_id!r} does not exist")
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
                    f"UPDATE {SCHEMA}.combats SET last_seq = %s WHERE combat_id = %s",
                    (last + len(pending.events), b.combat_id),
                )
            if b.request is not None:
                cur.execute(
                    f"INSERT INTO {SCHEMA}.requests"
                    " (principal, request_id, combat_id, response, at)"
                    " VALUES (%s, %s, %s, %s, %s)",
                    (*b.request, b.combat_id, pending.response, b.at),
                )
            if pending.summary is not None:
                cur.execute(
                    f"INSERT INTO {SCHEMA}.summaries (combat_id, body) VALUES (%s, %s)"
                    " ON CONFLICT (combat_id) DO UPDATE SET body = excluded.body",
                    (b.combat_id, pending.summary),
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
        (as the SQLite store's ``_prune``); a failed prune is dropped and runs again later."""
        db = self._writer
        cutoff = self._latest_at - REQUEST_MEMORY_SECONDS
        touched, self._touched = self._touched, set()
        with contextlib.suppress(psycopg.Error), db.transaction():
            db.execute(
                f"DELETE FROM {SCHEMA}.requests WHERE ctid IN"
                f" (SELECT ctid FROM {SCHEMA}.requests WHERE at < %s LIMIT %s)",
                (cutoff, PRUNE_MAX_ROWS),
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
                    db = _connect(self._location, role)
                    setattr(self, f"_{role}", db)
                return query(db)
            except psycopg.OperationalError as e:
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
        Raises ``StoreError("store_failed")`` for a combat the store does not hold."""
        with self._loading:
            return self._read("loader", partial(self._load_combat, combat_id))

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

    async def lookup_request(self, principal: str, request_id: str) -> tuple[str, Any] | None:
        """The combat id and response remembered for a retried request, or None if forgotten:
        from memory when recent, ruled out by the filter when never stored, else read from
        the database in a worker thread."""
        found = self._recent.get(principal, request_id)
        if found is not None and found[2] < self._latest_at - REQUEST_MEMORY_SECONDS:
            found = None
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


def _lock(db: psycopg.Connection[Any], location: str, wait: float = 0.0) -> None:
    """Take ``STORE_LOCK`` on the committer's session, waiting up to ``wait`` seconds for it,
    or raise ``StoreError`` naming the session that holds it (its ``application_name`` says
    which daemon, pid and host)."""
    deadline = time.monotonic() + wait
    while True:
        row = db.execute("SELECT pg_try_advisory_lock(%s)", (STORE_LOCK,)).fetchone()
        if row is not None and row[0]:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(RELOCK_POLL)
    holder = db.execute(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.database = ("
        " SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND l.classid = (%s >> 32)::oid AND l.objid = (%s & 4294967295)::oid",
        (STORE_LOCK, STORE_LOCK),
    ).fetchone()
    raise StoreError(
        "store_failed",
        "the store at {store} is in use by another turnkeeper daemon ({holder})",
        store=shown(location),
        holder=holder[0] if holder is not None else "gone since",
    )


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


def _generation(db: _Connection) -> int:
    row = db.execute(f"SELECT value FROM {SCHEMA}.generation").fetchone()
    return 0 if row is None else int(row[0])


def _bump(db: _Connection) -> int:
    """A new generation of the store lock, just taken on ``db``'s session."""
    row = db.execute(f"UPDATE {SCHEMA}.generation SET value = value + 1 RETURNING value").fetchone()
    assert row is not None
    return int(row[0])


def _page(
    combat_id: str, after: int, db: _Connection, limit: int = MAX_EVENTS_PER_READ
) -> list[tuple[int, bytes]]:
    """Up to ``limit`` of the combat's events after ``after``, as stored: (seq, body)."""
    return db.execute(
        f"SELECT seq, body FROM {SCHEMA}.events WHERE combat_id = %s AND seq > %s"
        " ORDER BY seq LIMIT %s",
        (combat_id, after, limit),
    ).fetchall()


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
    "StoreTakenError",
    "migrate",
    "shown",
]
