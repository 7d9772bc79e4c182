"""Tables, their managers and tokens in PostgreSQL, shared by every daemon on the database
(issue 12, part 3): a table made or a token added through one daemon works on every other,
and a token revoked through one stops working on all of them.

What each daemon's sessions ask (``TokenBook.load``) is a copy in memory, so that a request's
check never waits for the database. The copy is read again:

- whenever a change commits, from any daemon or ``turnkeeper token``/``table`` command: each
  change notifies ``CHANNEL`` in its transaction, and every daemon listens on it
  (``SharedTokens.run``), so a revocation reaches the other daemons' copies in milliseconds;
  a daemon's own change is read again right after its commit, and its notification (which
  names that daemon) is not read for again;
- every ``REREAD_SECONDS`` whatever it heard (when a fingerprint of the rows, which the server
  hashes, is not the copy's), and when its listening session is opened again: a notification
  lost with that session, or a row changed by hand, is made up for within that bound;
- when a hello brings a secret the copy does not know, and its hash is in the database (a
  token made a moment ago through another daemon works there at once), and when a table
  method or a ``create_combat`` names a table the copy does not have (or has with other
  managers) and the database has it.

Notifications heard while a read is under way are taken together, and one read follows for
all of them: a bridge making and revoking tokens in a loop costs each daemon about one read
per read's duration, not one per change.

The sessions' own check (``Sessions.watch_tokens``) then ends the sessions of a revoked token,
woken by each new copy (``changed``) rather than at its ``TOKEN_CHECK_SECONDS`` tick. A daemon
that cannot read the tokens keeps its last copy (and says so in its log) for ``STALE_SECONDS``
at most: then it ends its token sessions and refuses token hellos (``stale``) until a read
succeeds again, so that a revocation it could not hear is never honoured late without bound
(its other sessions to the database may still serve commands meanwhile).

The rows mirror the data directory's ``tokens.json`` (``turnkeeper.auth.Tokens``) field for
field, the SHA-256 of each secret and never the secret; ``turnkeeper token import`` copies a
data directory's file into the database.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import anyio
import anyio.abc
import psycopg
import psycopg.sql
import structlog

from ..auth import (
    MAX_TOKENS,
    AuthError,
    Contents,
    Principal,
    TableRecord,
    TokenBook,
    TokenRecord,
    TokenRole,
    check_table_name,
    check_token,
    digest,
    new_secret,
    new_token_id,
)
from ..store import StoreError
from ..tables import DEFAULT_TABLE, MAX_TABLES, new_table_id
from .changes import LISTEN_WAIT, RECONNECT_PAUSE
from .postgresql import SCHEMA, _connect, _error, _reason, _version, shown

log = structlog.get_logger("turnkeeper.tokens")

TOKENS_SINCE = 7
"""The first schema version that keeps tables and tokens (``postgresql.MIGRATIONS``)."""

CHANNEL = "turnkeeper_tokens"
"""Notified by every change of the tables and tokens; every daemon on the database listens."""

REREAD_SECONDS = 5.0
"""Seconds between two looks at the tables and tokens whatever was heard (their fingerprint,
and a read if it changed): the bound on a revocation whose notification was lost (the
listening session was away) or that was made by hand."""

STALE_SECONDS = 2 * REREAD_SECONDS + 2.0
"""Seconds a daemon trusts its copy after its last successful read (or look at the
fingerprint): two periodic looks missed, and a margin for one slow read. Past it the copy is
``stale`` and no token is honoured until a read succeeds again: a listening session that died
and cannot be opened again (a connection limit, pg_hba, ``datallowconn``) must not keep a
revoked token valid for ever."""

CHANGE_LOCK = 0x746B_544F_4B45_4E53
"""The advisory lock every change takes for its transaction: two changes at once (two
daemons, a daemon and the CLI) each see the other's, as ``tokens.lock`` does for the file,
and the limits are counted with nothing else being added."""

LOOKUP_THREADS = 1
"""Worker threads a daemon lends to look-ups (an unknown secret at hello, an unknown table):
they take turns on one session anyway, and a flood of hellos with made-up secrets while the
database is slow then waits in the event loop, not in threads the rest of the daemon needs."""

_Connection = psycopg.Connection[Any]
_T = TypeVar("_T")


class SharedTokens(TokenBook):
    """The tables and tokens of the PostgreSQL database at ``location``."""

    def __init__(self, location: str) -> None:
        super().__init__()
        self.location = location
        self._contents = Contents([], [])
        self._reading = threading.Lock()
        """Held across a read and the swap of the copy: reads end in the order they began,
        so one begun before a change never replaces the copy of one begun after it."""
        self._session: _Connection | None = None
        self._session_lock = threading.Lock()
        """One session for changes and lookups (a hello with an unknown secret costs one
        indexed statement, not a connection), used by one thread at a time."""
        self._closed = threading.Event()
        self._print: str | None = None
        """The fingerprint of the rows the copy was read from (``_fingerprint``)."""
        self._read_at: float | None = None
        """``time.monotonic()`` of the last read that succeeded (``stale``); None before any."""
        self._lookups: anyio.CapacityLimiter | None = None
        """``LOOKUP_THREADS``, made in the event loop at the first look-up."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop's, while ``run`` runs: a thread that read a new copy wakes the
        sessions' check through it. None in a command, which has no sessions."""
        self._new_copy: anyio.Event | None = None
        """Set (and made again) in the event loop each time the copy is a new one."""
        self._me = secrets.token_hex(8)
        """The payload of this book's notifications: its listener knows its own changes,
        which ``_changing`` reads again after their commit, and does not read for them."""
        self._owed = False
        """A change of this book committed and its read after it failed: the listener reads
        at its next turn, though it heard nothing else."""
        self._waking = threading.Lock()
        self._wake_due = False
        """A wake is on its way to the loop: one at a time, however many copies are read."""

    # Reading -------------------------------------------------------------------------------------

    def read(self, fresh: bool = False) -> Contents:
        """The tables and tokens as the database has them now (and the copy from now on)."""
        return self._reading_again(self._reload)

    def _reading_again(self, work: Callable[[_Connection], _T]) -> _T:
        """``work`` on the session, and once more on a new one if that one was lost: an
        idle session is found lost only when used (a server restart, a network blip). A
        read may run twice; a change is never run again (its commit may have landed)."""
        try:
            with self._db() as db:
                return work(db)
        except StoreError as e:
            if e.code != "store_unavailable":
                raise
        with self._db() as db:
            return work(db)

    def load(self) -> Contents:
        return self._contents

    def stale(self) -> bool:
        read_at = self._read_at
        return read_at is None or time.monotonic() - read_at > STALE_SECONDS

    def still_valid(self, principal: Principal) -> bool:
        # A stale copy vouches for no token (the sessions say ``tokens_unavailable``, asking
        # ``stale`` first): its revocations may not have been heard.
        if principal.key.startswith("token:") and self.stale():
            return False
        return super().still_valid(principal)

    async def lookup(self, secret: str) -> Principal | None:
        found = self.authenticate(secret)
        if found is not None:
            return found
        if not await anyio.to_thread.run_sync(self._look_up, secret, limiter=self._limiter()):
            return None
        # Asked of the copy in the event loop, with no wait before the session takes it: a
        # copy revoking the token read meanwhile is the one asked, or the sessions' check
        # sees it after the session has its principal, never between the two.
        return self.authenticate(secret)

    def _limiter(self) -> anyio.CapacityLimiter:
        if self._lookups is None:
            self._lookups = anyio.CapacityLimiter(LOOKUP_THREADS)
        return self._lookups

    def _look_up(self, secret: str) -> bool:
        """Whether ``secret``'s hash is in the database (and if so the copy is read again)."""

        def known(db: _Connection) -> bool:
            row = db.execute(
                f"SELECT 1 FROM {SCHEMA}.tokens WHERE hash = %s", (digest(secret),)
            ).fetchone()
            # A look-up queued behind another of the same secret finds it read already.
            if row is not None and self.authenticate(secret) is None:
                self._reload(db)
            return row is not None

        return self._reading_again(known)

    async def refresh(self, table: str) -> None:
        await anyio.to_thread.run_sync(self._look_up_table, table, limiter=self._limiter())

    def _look_up_table(self, table: str) -> None:
        """Read the copy again only if the database's row of ``table`` and its managers are
        not the copy's. A table method or ``create_combat`` naming a table the copy does not
        have then costs one indexed statement, as a hello with an unknown secret does, and
        not a whole read: a bridge naming made-up tables (or another's) in a loop cannot keep
        the look-up thread reading, and the hellos queued behind it wait for one statement
        each. Run on that thread, after the look-ups queued before it, so a table that one
        of them read already is not read again."""

        def differs(db: _Connection) -> None:
            row = db.execute(
                f"SELECT coalesce(array_agg(m.token_id ORDER BY m.position)"
                " FILTER (WHERE m.token_id IS NOT NULL), '{}')"
                f" FROM {SCHEMA}.tables t LEFT JOIN {SCHEMA}.table_managers m USING (table_id)"
                " WHERE t.table_id = %s GROUP BY t.table_id",
                (table,),
            ).fetchone()
            there = None if row is None else tuple(row[0])
            kept = next((t.managers for t in self._contents.tables if t.id == table), None)
            if there != kept:
                self._reload(db)

        self._reading_again(differs)

    def _reload(self, db: _Connection) -> Contents:
        with self._reading:
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                contents = _fetch(db)
                self._print = _fingerprint(db)
            self._read_at = time.monotonic()
            # Kept as it was when nothing changed: the sessions' check looks again only at
            # a new copy.
            if contents != self._contents:
                self._contents = contents
                self._wake()
            return self._contents

    def _wake(self) -> None:
        """Tell the event loop the copy is a new one (``changed``), without waiting for it:
        the thread may hold the session the loop waits for (``close``)."""
        loop = self._loop
        if loop is None:
            return
        with self._waking:
            if self._wake_due:
                return  # the wake on its way finds this copy: it is swapped in already
            self._wake_due = True
        with suppress(RuntimeError):  # the loop closed: the daemon is stopping
            loop.call_soon_threadsafe(self._tell_new_copy)

    def _tell_new_copy(self) -> None:
        with self._waking:
            self._wake_due = False
        if self._new_copy is not None:
            self._new_copy.set()
            self._new_copy = anyio.Event()

    async def changed(self) -> None:
        await (self._new_copy or anyio.Event()).wait()

    def _reread(self, db: _Connection) -> None:
        """The periodic read: whole only if the rows' fingerprint is not the copy's, so that
        a daemon at the limits is not rebuilding 20,000 records every few seconds for
        nothing (the server hashes them; the daemon reads one row)."""
        if _fingerprint(db) != self._print:
            self._reload(db)
        else:
            self._read_at = time.monotonic()  # the copy is the database's still

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``CHANNEL`` and read again what it says changed, until cancelled;
        started once the listening session listens (or failed to), so that a daemon serving
        hears every change from then on."""
        listening = threading.Event()
        thread = threading.Thread(
            target=self._listen, args=(listening,), name="turnkeeper-tokens", daemon=True
        )
        self._new_copy = anyio.Event()
        self._loop = asyncio.get_running_loop()
        thread.start()
        try:
            await anyio.to_thread.run_sync(listening.wait, abandon_on_cancel=True)
            task_status.started()
            await anyio.sleep_forever()
        finally:
            self._loop = None
            self._closed.set()

    def _listen(self, listening: threading.Event) -> None:
        while not self._closed.is_set():
            db: _Connection | None = None
            try:
                db = _connect(self.location, "tokens")
                db.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(CHANNEL)))
                listening.set()
                self._reload(db)  # what changed while nobody listened
                last = time.monotonic()
                while not self._closed.is_set():
                    heard = {n.payload for n in db.notifies(timeout=LISTEN_WAIT, stop_after=1)}
                    if heard:
                        heard |= _drain(db)
                    # This book's own changes were read again after their commits
                    # (``_changing``), unless that read failed (``_owed``): then this read
                    # is owed, whatever was heard. One that fails ends this session, and
                    # the next one reads as it listens.
                    if heard - {self._me} or self._owed:
                        self._owed = False
                        self._reload(db)
                        last = time.monotonic()
                    elif time.monotonic() - last >= REREAD_SECONDS:
                        self._reread(db)
                        last = time.monotonic()
            except psycopg.Error as e:
                log.warning("tokens_listener_lost", reason=_reason(e, self.location))
                listening.set()  # serve meanwhile on the copy read at the start
                # The look-up session may still be open where a new one is refused: it keeps
                # the copy current (and not ``stale``) while this one cannot listen.
                with suppress(StoreError), self._db() as session:
                    self._reread(session)
                self._closed.wait(RECONNECT_PAUSE)
            finally:
                if db is not None:
                    db.close()

    def close(self) -> None:
        self._closed.set()
        with self._session_lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    @contextmanager
    def _db(self) -> Iterator[_Connection]:
        """The session for changes and lookups, opened again if it was lost; a database
        error is a ``StoreError`` (``store_unavailable`` when the server could not be
        reached), and so is a database before the migration that keeps tokens."""
        with self._session_lock:
            try:
                db = self._session
                if db is None or db.broken or db.closed:
                    db = self._session = _connect(self.location, "tokens")
                    version = _version(db)
                    if version < TOKENS_SINCE:
                        db.close()
                        self._session = None
                        raise StoreError(
                            "store_failed",
                            "{store}: schema version {version} keeps no tables nor tokens:"
                            " run turnkeeper migrate",
                            store=shown(self.location),
                            version=str(version),
                        )
                yield db
            except psycopg.Error as e:
                if isinstance(e, psycopg.OperationalError) and self._session is not None:
                    self._session.close()  # lost, or in a state not worth keeping
                    self._session = None
                # The server's words go to the log only, as the store's do.
                raise _error(e, self.location) from e

    # Changing ------------------------------------------------------------------------------------

    @contextmanager
    def _changing(self) -> Iterator[_Connection]:
        """A transaction holding ``CHANGE_LOCK`` that notifies ``CHANNEL`` as it commits;
        this daemon's copy is read again once it has. An error rolls it back whole."""
        with self._db() as db:
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(%s)", (CHANGE_LOCK,))
                yield db
                db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self._me))
            try:
                self._reload(db)
            except psycopg.Error as e:
                # The change is committed: its caller gets its result (a new token's secret,
                # which is nowhere else), and the copy catches up at the next read (its own
                # notification, which the listener reads for then; the periodic look; a
                # look-up).
                self._owed = True
                log.warning("tokens_reload_failed", reason=_reason(e, self.location))

    def add(
        self,
        role: TokenRole,
        user: str | None = None,
        *,
        narrator: bool = False,
        table: str = DEFAULT_TABLE,
        host: bool = False,
    ) -> tuple[TokenRecord, str]:
        check_token(role, user, narrator, host)
        with self._changing() as db:
            if table != DEFAULT_TABLE and not _has_table(db, table):
                raise AuthError("unknown_table", "no table {table!r}", "table", table=table)
            if _count(db, "tokens") >= MAX_TOKENS:
                raise AuthError("limit_reached", "at most {limit} tokens", "role", limit=MAX_TOKENS)
            secret = new_secret()
            while True:
                record = TokenRecord(
                    id=new_token_id(set()),
                    role=role,
                    user=user,
                    narrator=narrator,
                    hash=digest(secret),
                    created=time.time(),
                    table=table,
                    host=host,
                )
                if _insert_token(db, record):
                    break  # else its id was taken: draw another
        return record, secret

    def revoke(self, token_id: str, table: str | None = None) -> bool:
        with self._changing() as db:
            gone = db.execute(
                f"DELETE FROM {SCHEMA}.tokens WHERE token_id = %s"
                " AND (%s::text IS NULL OR table_id = %s) RETURNING 1",
                (token_id, table, table),
            ).fetchone()
        return gone is not None

    def add_table(self, name: str, manager: str | None = None) -> TableRecord:
        check_table_name(name)
        with self._changing() as db:
            if _count(db, "tables") >= MAX_TABLES:
                raise AuthError("limit_reached", "at most {limit} tables", "name", limit=MAX_TABLES)
            while True:
                record = TableRecord(
                    id=new_table_id(frozenset()),
                    name=name,
                    created=time.time(),
                    managers=() if manager is None else (manager,),
                )
                if _insert_table(db, record):
                    break  # else its id was taken: draw another
        return record

    def grant(self, table: str, token_id: str, *, granted: bool = True) -> None:
        with self._changing() as db:
            if not _has_table(db, table):
                raise AuthError("unknown_table", "no table {table!r}", "table", table=table)
            host = db.execute(
                f"SELECT 1 FROM {SCHEMA}.tokens WHERE token_id = %s AND host", (token_id,)
            ).fetchone()
            if host is None:
                raise AuthError(
                    "invalid_value", "no hosting bridge token {id!r}", "token", id=token_id
                )
            # Taken out and put back: a grant made again goes last, as in the file.
            db.execute(
                f"DELETE FROM {SCHEMA}.table_managers WHERE table_id = %s AND token_id = %s",
                (table, token_id),
            )
            if granted:
                _insert_manager(db, table, token_id)

    def import_contents(self, contents: Contents) -> tuple[int, int]:
        """Copy a token file's tables and tokens (``Tokens.read``) into the database, in one
        transaction; returns how many tables and tokens were new. One already there, the same
        in every field, is left as it is, so an import can be run again; one there with the
        same id and anything else different, or a token whose secret another token there has,
        refuses the whole import."""
        with self._changing() as db:
            there = _fetch(db)
            tables = {t.id: t for t in there.tables}
            tokens = {r.id: r for r in there.tokens}
            new_tables = [t for t in contents.tables if t.id not in tables]
            new_tokens = [r for r in contents.tokens if r.id not in tokens]
            for t in contents.tables:
                if t.id in tables and (tables[t.id].name, tables[t.id].created) != (
                    t.name,
                    t.created,
                ):
                    raise AuthError(
                        "invalid_value",
                        "table {id!r} is in the database already, with another name",
                        "table",
                        id=t.id,
                    )
            hashes = {r.hash: r.id for r in there.tokens}
            for r in contents.tokens:
                if r.id in tokens and tokens[r.id] != r:
                    raise AuthError(
                        "invalid_value",
                        "token {id!r} is in the database already, and is another token",
                        "token",
                        id=r.id,
                    )
                # Said here, not left to UNIQUE(hash): its error names no token.
                other = hashes.get(r.hash, r.id)
                if other != r.id:
                    raise AuthError(
                        "invalid_value",
                        "token {id!r} has the secret of token {other!r} in the database already",
                        "token",
                        id=r.id,
                        other=other,
                    )
            if len(tables) + len(new_tables) > MAX_TABLES:
                raise AuthError("limit_reached", "at most {limit} tables", "name", limit=MAX_TABLES)
            if len(tokens) + len(new_tokens) > MAX_TOKENS:
                raise AuthError("limit_reached", "at most {limit} tokens", "role", limit=MAX_TOKENS)
            for t in new_tables:
                _insert_table(db, TableRecord(t.id, t.name, t.created))
            for r in new_tokens:
                _insert_token(db, r)
            kept = tokens.keys() | {r.id for r in new_tokens}
            for t in contents.tables:
                # A file may still name a manager whose token was taken out by hand.
                for manager in t.managers:
                    if manager in kept:
                        _insert_manager(db, t.id, manager)
        return len(new_tables), len(new_tokens)


def _drain(db: _Connection) -> set[str]:
    """Take every notification already received (while the last read ran, or in the socket
    now) without waiting, and return their payloads: the read that follows covers all of
    their changes, so a burst of changes costs one read, not one each. A change that commits
    after that read has begun notifies after it too, and that notification makes the next
    read."""
    return {n.payload for n in db.notifies(timeout=0)}


def _fetch(db: _Connection) -> Contents:
    """The tables (with their managers) and tokens, each in the order they were made."""
    tables = [
        TableRecord(table_id, name, created, tuple(managers))
        for table_id, name, created, managers in db.execute(
            "SELECT t.table_id, t.name, t.created, coalesce(array_agg(m.token_id"
            " ORDER BY m.position) FILTER (WHERE m.token_id IS NOT NULL), '{}')"
            f" FROM {SCHEMA}.tables t LEFT JOIN {SCHEMA}.table_managers m USING (table_id)"
            " GROUP BY t.table_id ORDER BY t.position"
        )
    ]
    tokens = [
        TokenRecord(*row)
        for row in db.execute(
            "SELECT token_id, role, user_id, narrator, hash, created, table_id, host"
            f" FROM {SCHEMA}.tokens ORDER BY position"
        )
    ]
    return Contents(tokens, tables)


def _fingerprint(db: _Connection) -> str:
    """An MD5 of every row of the tables, their managers and the tokens, in order (each row
    as PostgreSQL writes it out, quoted): any change, one made by hand without a
    notification too, changes it."""
    row = db.execute(
        "SELECT md5(concat("
        f" (SELECT string_agg(r::text, ';' ORDER BY r.position) FROM {SCHEMA}.tokens r), '|',"
        f" (SELECT string_agg(r::text, ';' ORDER BY r.position) FROM {SCHEMA}.tables r), '|',"
        f" (SELECT string_agg(r::text, ';' ORDER BY r.position) FROM {SCHEMA}.table_managers r)"
        "))"
    ).fetchone()
    assert row is not None
    return str(row[0])


def _has_table(db: _Connection, table: str) -> bool:
    row = db.execute(f"SELECT 1 FROM {SCHEMA}.tables WHERE table_id = %s", (table,)).fetchone()
    return row is not None


def _count(db: _Connection, relation: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {SCHEMA}.{relation}").fetchone()
    return 0 if row is None else int(row[0])


def _insert_token(db: _Connection, r: TokenRecord) -> bool:
    """Insert ``r``; False (nothing inserted) if its id is taken."""
    row = db.execute(
        f"INSERT INTO {SCHEMA}.tokens"
        " (token_id, role, user_id, narrator, hash, created, table_id, host)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (token_id) DO NOTHING RETURNING 1",
        (r.id, r.role, r.user, r.narrator, r.hash, r.created, r.table, r.host),
    ).fetchone()
    return row is not None


def _insert_table(db: _Connection, t: TableRecord) -> bool:
    """Insert ``t`` with its managers; False (nothing inserted) if its id is taken."""
    row = db.execute(
        f"INSERT INTO {SCHEMA}.tables (table_id, name, created) VALUES (%s, %s, %s)"
        " ON CONFLICT (table_id) DO NOTHING RETURNING 1",
        (t.id, t.name, t.created),
    ).fetchone()
    if row is None:
        return False
    for manager in t.managers:
        _insert_manager(db, t.id, manager)
    return True


def _insert_manager(db: _Connection, table: str, token_id: str) -> None:
    db.execute(
        f"INSERT INTO {SCHEMA}.table_managers (table_id, token_id) VALUES (%s, %s)"
        " ON CONFLICT DO NOTHING",
        (table, token_id),
    )
