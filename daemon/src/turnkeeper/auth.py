"""Who a connection is (R16): tokens in a 0600 file, and the Unix peer's own uid.

A token is shown once, when it is made; the file keeps only its SHA-256. Roles:
``narrator``; ``player`` (bound to a user id); ``observer``; ``bridge`` (acts for the users it
names in each command, and as narrator only when made with ``narrator=True``).

Every token belongs to a table (``turnkeeper.tables``) and reaches that table's combats only.
A bridge made with ``host=True`` also manages tables: it makes them through the protocol, and
issues and revokes the tokens of those it made or the operator granted it (their ``managers``).
The file (version 2) holds the tables and the tokens; a version 1 file, a bare list of tokens
from before tables, is read as the default table's tokens, and rewritten as version 2 at the
next change.

A daemon on PostgreSQL keeps them in the database instead, shared by every daemon on it
(``turnkeeper.stores.tokens``); both are a ``TokenBook``, which is all sessions know.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, NoReturn

import anyio
import structlog
from anyio.abc import TaskStatus

from turnkeeper_engine import Actor
from turnkeeper_engine.errors import Arg, ProtocolError, TemplatedError

from .tables import DEFAULT_TABLE, MAX_TABLE_NAME, MAX_TABLES, Scope, new_table_id

log = structlog.get_logger("turnkeeper.auth")

TokenRole = Literal["narrator", "player", "observer", "bridge"]
ROLES: tuple[TokenRole, ...] = ("narrator", "player", "observer", "bridge")
TOKEN_FILE = "tokens.json"
TOKEN_LOCK = "tokens.lock"
"""Locked (``flock``) around each change of the token file: the ``token`` and ``table``
commands and the daemon (for a hosting bridge) both change it, and neither may lose the
other's change."""
FILE_VERSION = 2
TOKEN_BYTES = 32
"""256 bits of secret: guessing is hopeless, and it still fits on a line."""
SECRET_PREFIX = "tk_"
"""Starts every secret: base64url may start with ``-``, and ``--token -x…`` reads as an
option. The prefix adds no secrecy and takes none: all TOKEN_BYTES stay random."""
MAX_TOKENS = 10_000
"""The file is read whole at each start; a table has a handful of tokens, a server hundreds."""


class AuthError(ProtocolError):
    """A refused identity or token change: ``code``, ``message`` and ``field``, the message a
    string-literal template with named arguments (like ``RequestError``)."""


class TokenFileError(TemplatedError):
    """The token file cannot be used: the message names the file and what is wrong with it.
    It stops the daemon's start and the ``token`` commands; it is never sent to a client."""

    def __init__(self, template: str, **args: Arg) -> None:
        super().__init__(template, args)


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    role: TokenRole
    user: str | None
    narrator: bool
    hash: str
    created: float
    table: str = DEFAULT_TABLE
    host: bool = False
    """A hosting bridge: may make tables, and manage the tokens of the tables it manages."""


@dataclass(frozen=True, slots=True)
class TableRecord:
    """A table other than the default one: its id, a name for people, and the hosting
    bridges' tokens that manage it (the one that made it, and those the operator granted)."""

    id: str
    name: str
    created: float
    managers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Contents:
    """What the token file holds."""

    tokens: list[TokenRecord]
    tables: list[TableRecord]

    def table_ids(self) -> frozenset[str]:
        return frozenset(t.id for t in self.tables) | {DEFAULT_TABLE}


EMPTY = Contents([], [])


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated connection: the key its request ids are remembered under, its role, and
    the user it is bound to (players) or the bridge's name."""

    key: str
    role: TokenRole
    user: str | None = None
    narrator: bool = False
    table: str | None = DEFAULT_TABLE
    """The token's table; None for the operator (the daemon's own uid), who has every one."""
    host: bool = False

    def reader(self) -> Actor:
        """Who this principal is when it reads (queries, subscriptions): a bridge names no user
        there, so it reads as narrator if it may act as one, else as an observer."""
        if self.role == "bridge":
            return (
                Actor("narrator", None, f"bridge:{self.key}")
                if self.narrator
                else Actor("observer")
            )
        return self.actor(None)

    def actor(self, as_user: str | None) -> Actor:
        """The engine actor for one command. A bridge names the user it acts for (R16)."""
        if self.role == "bridge":
            via = f"bridge:{self.key}"
            if as_user is None:
                if not self.narrator:
                    raise AuthError("as_user_required", "a bridge names the user it acts for", "as")
                return Actor("narrator", None, via)
            return Actor("player", as_user, via)
        if as_user is not None:
            raise AuthError("forbidden", "only a bridge acts for other users", "as")
        if self.role == "narrator":
            return Actor("narrator", self.user)
        if self.role == "player":
            return Actor("player", self.user)
        return Actor("observer", self.user)


def digest(secret: str) -> str:
    """What is kept of a secret: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh token secret: SECRET_PREFIX, then TOKEN_BYTES random bytes in base64url."""
    return SECRET_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def new_token_id(taken: set[str]) -> str:
    """A fresh token id, none of ``taken``: an id is drawn from 32 random bits, and two
    tokens of one id would share their sessions' checks, request ids and grants."""
    while True:
        token_id = secrets.token_hex(4)
        if token_id not in taken:
            return token_id


_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "role": (str,),
    "user": (str, type(None)),
    "narrator": (bool,),
    "hash": (str,),
    "created": (int, float),
}
"""A token record's fields and the JSON types each may hold (version 1)."""
_FIELDS_2: dict[str, tuple[type, ...]] = {**_FIELDS, "table": (str,), "host": (bool,)}
"""A token record's fields in version 2: its table, and whether it hosts tables."""
_TABLE_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "name": (str,),
    "created": (int, float),
    "managers": (list,),
}


def _checked(
    path: Path, what: Literal["token", "table"], n: int, item: object, fields: dict[str, Any]
) -> dict[str, Any]:
    """``item`` if it is an object with exactly ``fields``, each of its type."""
    if not isinstance(item, dict) or set(item) != set(fields):
        names = ", ".join(fields)
        if what == "table":
            raise TokenFileError(
                "{path}: table {n} does not have exactly the fields {fields}",
                path=str(path),
                n=n,
                fields=names,
            )
        raise TokenFileError(
            "{path}: token {n} does not have exactly the fields {fields}",
            path=str(path),
            n=n,
            fields=names,
        )
    for name, types in fields.items():
        # bool is an int to Python: a ``created`` of true is still refused.
        value = item[name]
        if not isinstance(value, types) or (name == "created" and isinstance(value, bool)):
            _wrong_type(path, what, n, name)
    return item


def _wrong_type(path: Path, what: Literal["token", "table"], n: int, name: str) -> NoReturn:
    if what == "table":
        raise TokenFileError(
            "{path}: table {n} has a {field} of the wrong type", path=str(path), n=n, field=name
        )
    raise TokenFileError(
        "{path}: token {n} has a {field} of the wrong type", path=str(path), n=n, field=name
    )


def _parse(path: Path, text: str) -> Contents:
    """What a token file holds, or a ``TokenFileError`` naming the file and what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise TokenFileError(
            "{path}: not valid JSON ({error})", path=str(path), error=str(e)
        ) from e
    if isinstance(raw, list):
        # Version 1: the default table's tokens, from before tables.
        items, table_items, fields = raw, [], _FIELDS
    elif (
        isinstance(raw, dict)
        and raw.get("version") == FILE_VERSION
        and isinstance(raw.get("tokens"), list)
        and isinstance(raw.get("tables"), list)
    ):
        items, table_items, fields = raw["tokens"], raw["tables"], _FIELDS_2
    else:
        raise TokenFileError(
            "{path}: not a list of tokens, nor a version {version} token file",
            path=str(path),
            version=FILE_VERSION,
        )
    if len(items) > MAX_TOKENS:
        raise TokenFileError(
            "{path}: more than {limit} tokens",
            path=str(path),
            limit=MAX_TOKENS,
        )
    if len(table_items) > MAX_TABLES:
        raise TokenFileError("{path}: more than {limit} tables", path=str(path), limit=MAX_TABLES)
    tables: list[TableRecord] = []
    seen = {DEFAULT_TABLE}
    for n, item in enumerate(table_items, start=1):
        found = _checked(path, "table", n, item, _TABLE_FIELDS)
        if not all(isinstance(m, str) for m in found["managers"]):
            _wrong_type(path, "table", n, "managers")
        if found["id"] in seen:
            raise TokenFileError(
                "{path}: table {n} has the id {id!r} of another table",
                path=str(path),
                n=n,
                id=found["id"],
            )
        seen.add(found["id"])
        tables.append(TableRecord(**{**found, "managers": tuple(found["managers"])}))
    known = frozenset(seen)
    records = []
    ids: set[str] = set()
    for n, item in enumerate(items, start=1):
        found = _checked(path, "token", n, item, fields)
        # A token's id keys its session's check, its remembered request ids and its grants:
        # two tokens of one id would share them.
        if found["id"] in ids:
            raise TokenFileError(
                "{path}: token {n} has the id {id!r} of another token",
                path=str(path),
                n=n,
                id=found["id"],
            )
        ids.add(found["id"])
        if found["role"] not in ROLES:
            raise TokenFileError(
                "{path}: token {n} has an unknown role {role!r}",
                path=str(path),
                n=n,
                role=found["role"],
            )
        if found.get("table", DEFAULT_TABLE) not in known:
            raise TokenFileError(
                "{path}: token {n} has an unknown table {table!r}",
                path=str(path),
                n=n,
                table=found["table"],
            )
        records.append(TokenRecord(**found))
    return Contents(records, tables)


class _Index:
    """What sessions ask of the token file, worked out once per read of it: the tokens' ids,
    the tables each hosting bridge's token manages (in the file's order), and the sessions'
    table sets, made as they are asked for."""

    def __init__(self, contents: Contents) -> None:
        self.contents = contents
        self.ids = frozenset(r.id for r in contents.tokens)
        managed: dict[str, list[str]] = {}
        for t in contents.tables:
            for m in t.managers:
                managed.setdefault(m, []).append(t.id)
        self.managed = {m: tuple(tables) for m, tables in managed.items()}
        self.scopes: dict[str, frozenset[str]] = {}


def check_token(role: str, user: str | None, narrator: bool, host: bool) -> None:
    """Refuse a token that cannot be made (``AuthError``, ``invalid_value``), before anything
    is read or written."""
    if role not in ROLES:
        raise AuthError(
            "invalid_value", "role must be one of {roles}", "role", roles=", ".join(ROLES)
        )
    if role == "player" and not user:
        raise AuthError("invalid_value", "a player token is bound to a user id", "user")
    if narrator and role != "bridge":
        raise AuthError("invalid_value", "only a bridge token takes --narrator", "narrator")
    if host and role != "bridge":
        raise AuthError("invalid_value", "only a bridge token takes --host", "host")
    if user is not None and not user.isprintable():
        raise AuthError(
            "invalid_value", "a user id has no control characters nor line breaks", "user"
        )


def check_table_name(name: str) -> None:
    """Refuse a table name that cannot be given (``AuthError``, ``invalid_value``)."""
    if not 1 <= len(name) <= MAX_TABLE_NAME:
        raise AuthError(
            "invalid_value",
            "a table's name has 1 to {limit} characters",
            "name",
            limit=MAX_TABLE_NAME,
        )
    if not name.isprintable():
        # Listed one per line (``turnkeeper table list``): a line break would forge a row.
        raise AuthError(
            "invalid_value", "a table's name has no control characters nor line breaks", "name"
        )


class TokenBook(ABC):
    """Where a daemon's tokens and tables are kept: the data directory's file (``Tokens``) or
    the PostgreSQL database its daemons share (``turnkeeper.stores.tokens.SharedTokens``).
    Sessions ask ``load`` and what is worked out from it, which never waits; changes wait (a
    worker thread runs them)."""

    def __init__(self) -> None:
        self._index = _Index(EMPTY)
        """The contents last loaded, indexed: a session's check and its tables are lookups,
        not a scan of every token and table, however many sessions, tokens and tables."""

    @abstractmethod
    def read(self, fresh: bool = False) -> Contents:
        """The tokens and tables as kept now; raises what is wrong with where they are kept."""

    @abstractmethod
    def load(self) -> Contents:
        """The tokens and tables for a running daemon: at once, never an error."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep ``load`` current while the daemon runs, if that takes a task; started once
        it keeps it current. A file needs none: it is read as it changes."""
        task_status.started()

    async def changed(self) -> None:
        """Return when ``load`` has a new copy, if the book knows when: else never, and the
        sessions' check finds a new copy by asking ``load`` (a file is looked at then)."""
        await anyio.sleep_forever()

    def stale(self) -> bool:
        """True while ``load`` is too old to vouch for a token: the book could not read where
        tokens are kept for longer than it allows. The daemon then ends its token sessions and
        refuses token hellos (``tokens_unavailable``); its operator's, by uid, go on. A file
        is never stale: it is read as it changes."""
        return False

    async def lookup(self, secret: str) -> Principal | None:
        """``authenticate``, for a hello: a book that may lag behind where tokens are kept
        looks an unknown secret up there before it refuses it."""
        return self.authenticate(secret)

    async def refresh(self, table: str) -> None:  # noqa: B027 - a file's ``load`` is up to date
        """Bring ``table`` in ``load`` up to date now, for a request that found it missing
        (or not managed by its caller)."""

    def close(self) -> None:  # noqa: B027 - a file is held open by nothing
        """Let go of what the book holds open."""

    @abstractmethod
    def add(
        self,
        role: TokenRole,
        user: str | None = None,
        *,
        narrator: bool = False,
        table: str = DEFAULT_TABLE,
        host: bool = False,
    ) -> tuple[TokenRecord, str]:
        """Make a token of ``table``; returns its record and the secret, which is not kept."""

    @abstractmethod
    def revoke(self, token_id: str, table: str | None = None) -> bool:
        """Remove a token (of ``table`` only, when given) and its grants; False if there is
        none."""

    @abstractmethod
    def add_table(self, name: str, manager: str | None = None) -> TableRecord:
        """Make a table named ``name``, managed by the token ``manager`` if given."""

    @abstractmethod
    def grant(self, table: str, token_id: str, *, granted: bool = True) -> None:
        """Let a hosting bridge's token manage ``table`` (or, not ``granted``, no longer)."""

    def still_valid(self, principal: Principal) -> bool:
        """False once the token a session authenticated with has been revoked."""
        if not principal.key.startswith("token:"):
            return True
        return principal.key.removeprefix("token:") in self._indexed().ids

    def _indexed(self) -> _Index:
        contents = self.load()
        if contents is not self._index.contents:
            self._index = _Index(contents)
        return self._index

    def scope(self, principal: Principal) -> Scope:
        """The tables ``principal`` may see and touch: None (every one) for the operator; a
        token's own table, and for a hosting bridge those it manages too. The same set
        object for a token until the tokens change."""
        if principal.table is None:
            return None
        if not principal.host:
            return frozenset((principal.table,))
        index = self._indexed()
        token_id = principal.key.removeprefix("token:")
        found = index.scopes.get(token_id)
        if found is None:
            found = index.scopes[token_id] = frozenset(
                (principal.table, *index.managed.get(token_id, ()))
            )
        return found

    def managed(self, principal: Principal) -> list[str]:
        """The ids of the tables ``principal`` manages: every table for the operator (the
        default one first), those it made or was granted for a hosting bridge, else none."""
        if principal.table is None:
            return [DEFAULT_TABLE, *(t.id for t in self.load().tables)]
        if not principal.host:
            return []
        return list(self._indexed().managed.get(principal.key.removeprefix("token:"), ()))

    def authenticate(self, secret: str) -> Principal | None:
        kept = digest(secret)
        for r in self.load().tokens:
            if hmac.compare_digest(r.hash, kept):
                return Principal(f"token:{r.id}", r.role, r.user, r.narrator, r.table, r.host)
        return None


class Tokens(TokenBook):
    """The token file of a data directory: its tokens and its tables."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        self.path = data_dir / TOKEN_FILE
        self._cache: tuple[tuple[int, ...], Contents | TokenFileError] | None = None
        self._good: Contents = EMPTY
        """The last contents read without a problem: what a running daemon keeps using while
        the file is malformed."""
        self._problem: str | None = None
        """The problem last logged by ``load``, so that it is logged once, not per request."""

    def read(self, fresh: bool = False) -> Contents:
        """The tokens and tables, re-read only when the file changed (a revocation takes
        effect at once, without a read of the file per request), or always if ``fresh``. A
        malformed or unreadable file raises ``TokenFileError`` naming the file and the
        problem."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._cache = None
            self._good = EMPTY
            return EMPTY
        # A token command replaces the file (a new inode) even within one tick of the clock.
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if fresh or self._cache is None or self._cache[0] != stamp:
            try:
                text = self.path.read_text()
            except (OSError, UnicodeDecodeError) as e:
                # Not remembered: a permission put right changes no modification time.
                why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
                raise TokenFileError(
                    "{path}: cannot be read ({error})",
                    path=str(self.path),
                    error=why or type(e).__name__,
                ) from e
            try:
                self._cache = (stamp, _parse(self.path, text))
            except TokenFileError as e:
                self._cache = (stamp, e)
        found = self._cache[1]
        if isinstance(found, TokenFileError):
            raise found
        self._good = found
        return found

    def load(self) -> Contents:
        """The tokens and tables, for a running daemon: when the file turns malformed (a hand
        edit gone wrong), the last good ones stay in force and the problem is logged as an
        error, once until the file is good again. Refusing every token instead would lock out
        every table for a typo; and the daemon reads the file at start-up, so it never starts
        on a bad one."""
        try:
            contents = self.read()
        except TokenFileError as e:
            if e.message != self._problem:
                self._problem = e.message
                log.error("token_file_invalid", path=str(self.path), problem=e.message)
            return self._good
        self._problem = None
        return contents

    def _save(self, contents: Contents) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        # Created 0600 from the start: the file is never readable by others, not even briefly.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        body = {
            "version": FILE_VERSION,
            "tables": [{**asdict(t), "managers": list(t.managers)} for t in contents.tables],
            "tokens": [asdict(r) for r in contents.tokens],
        }
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1)
            # On disk before it replaces the old file, and the rename on disk before the change
            # is reported: a token made or revoked must not come back after a power cut.
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    @contextmanager
    def _changing(self) -> Iterator[Contents]:
        """The file's contents, read under its lock, which is held until the change is saved:
        a ``token`` command and the daemon changing it together each keep the other's change.
        A malformed file is refused (``TokenFileError``), never overwritten."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path.parent / TOKEN_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Read again whatever the cache says: a change made within one tick of the clock
            # can keep the file's size, and in place its inode too (a hand edit).
            yield self.read(fresh=True)
        finally:
            os.close(fd)

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
        with self._changing() as contents:
            if table not in contents.table_ids():
                raise AuthError("unknown_table", "no table {table!r}", "table", table=table)
            if len(contents.tokens) >= MAX_TOKENS:
                raise AuthError("limit_reached", "at most {limit} tokens", "role", limit=MAX_TOKENS)
            secret = new_secret()
            record = TokenRecord(
                id=new_token_id({r.id for r in contents.tokens}),
                role=role,
                user=user,
                narrator=narrator,
                hash=digest(secret),
                created=time.time(),
                table=table,
                host=host,
            )
            self._save(Contents([*contents.tokens, record], contents.tables))
        return record, secret

    def revoke(self, token_id: str, table: str | None = None) -> bool:
        with self._changing() as contents:
            kept = [
                r
                for r in contents.tokens
                if r.id != token_id or (table is not None and r.table != table)
            ]
            if len(kept) == len(contents.tokens):
                return False
            tables = [
                replace(t, managers=tuple(m for m in t.managers if m != token_id))
                for t in contents.tables
            ]
            self._save(Contents(kept, tables))
        return True

    def add_table(self, name: str, manager: str | None = None) -> TableRecord:
        check_table_name(name)
        with self._changing() as contents:
            if len(contents.tables) >= MAX_TABLES:
                raise AuthError("limit_reached", "at most {limit} tables", "name", limit=MAX_TABLES)
            record = TableRecord(
                id=new_table_id(contents.table_ids()),
                name=name,
                created=time.time(),
                managers=() if manager is None else (manager,),
            )
            self._save(Contents(contents.tokens, [*contents.tables, record]))
        return record

    def grant(self, table: str, token_id: str, *, granted: bool = True) -> None:
        with self._changing() as contents:
            found = [t for t in contents.tables if t.id == table]
            if not found:
                raise AuthError("unknown_table", "no table {table!r}", "table", table=table)
            hosts = {r.id for r in contents.tokens if r.host}
            if token_id not in hosts:
                raise AuthError(
                    "invalid_value", "no hosting bridge token {id!r}", "token", id=token_id
                )
            others = tuple(m for m in found[0].managers if m != token_id)
            changed = replace(found[0], managers=(*others, token_id) if granted else others)
            tables = [changed if t.id == table else t for t in contents.tables]
            self._save(Contents(contents.tokens, tables))
