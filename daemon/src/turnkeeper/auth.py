"""Who a connection is (R16): tokens in a 0600 file, and the Unix peer's own uid.

A token is shown once, when it is made; the file keeps only its SHA-256. Roles:
``narrator``; ``player`` (bound to a user id); ``observer``; ``bridge`` (acts for the users it
names in each command, and as narrator only when made with ``narrator=True``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import structlog

from turnkeeper_engine import Actor
from turnkeeper_engine.errors import Arg, ProtocolError, TemplatedError

log = structlog.get_logger("turnkeeper.auth")

TokenRole = Literal["narrator", "player", "observer", "bridge"]
ROLES: tuple[TokenRole, ...] = ("narrator", "player", "observer", "bridge")
TOKEN_FILE = "tokens.json"
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


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated connection: the key its request ids are remembered under, its role, and
    the user it is bound to (players) or the bridge's name."""

    key: str
    role: TokenRole
    user: str | None = None
    narrator: bool = False

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


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh token secret: SECRET_PREFIX, then TOKEN_BYTES random bytes in base64url."""
    return SECRET_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "role": (str,),
    "user": (str, type(None)),
    "narrator": (bool,),
    "hash": (str,),
    "created": (int, float),
}
"""A token record's fields and the JSON types each may hold."""


def _parse(path: Path, text: str) -> list[TokenRecord]:
    """The records of a token file, or a ``TokenFileError`` naming the file and what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise TokenFileError(
            "{path}: not valid JSON ({error})", path=str(path), error=str(e)
        ) from e
    if not isinstance(raw, list):
        raise TokenFileError("{path}: not a list of tokens", path=str(path))
    if len(raw) > MAX_TOKENS:
        raise TokenFileError(
            "{path}: more than {limit} tokens",
            path=str(path),
            limit=MAX_TOKENS,
        )
    records = []
    for n, item in enumerate(raw, start=1):
        if not isinstance(item, dict) or set(item) != set(_FIELDS):
            raise TokenFileError(
                "{path}: token {n} does not have exactly the fields {fields}",
                path=str(path),
                n=n,
                fields=", ".join(_FIELDS),
            )
        for name, types in _FIELDS.items():
            # bool is an int to Python: a ``created`` of true is still refused.
            value = item[name]
            if not isinstance(value, types) or (name == "created" and isinstance(value, bool)):
                raise TokenFileError(
                    "{path}: token {n} has a {field} of the wrong type",
                    path=str(path),
                    n=n,
                    field=name,
                )
        if item["role"] not in ROLES:
            raise TokenFileError(
                "{path}: token {n} has an unknown role {role!r}",
                path=str(path),
                n=n,
                role=item["role"],
            )
        records.append(TokenRecord(**item))
    return records


class Tokens:
    """The token file of a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / TOKEN_FILE
        self._cache: tuple[tuple[int, ...], list[TokenRecord] | TokenFileError] | None = None
        self._good: list[TokenRecord] = []
        """The last tokens read without a problem: what a running daemon keeps using while
        the file is malformed."""
        self._problem: str | None = None
        """The problem last logged by ``load``, so that it is logged once, not per request."""
        self._ids: tuple[list[TokenRecord], frozenset[str]] = ([], frozenset())
        """The ids of the tokens last loaded, with the list they come from: a session's check
        is a lookup, not a scan of every token, however many sessions and tokens there are."""

    def read(self) -> list[TokenRecord]:
        """The tokens, re-read only when the file changed (a revocation takes effect at once,
        without a read of the file per request). A malformed or unreadable file raises
        ``TokenFileError`` naming the file and the problem."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._cache = None
            self._good = []
            return []
        # A token command replaces the file (a new inode) even within one tick of the clock.
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._cache is None or self._cache[0] != stamp:
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

    def load(self) -> list[TokenRecord]:
        """The tokens, for a running daemon: when the file turns malformed (a hand edit gone
        wrong), the last good tokens stay in force and the problem is logged as an error, once
        until the file is good again. Refusing every token instead would lock out every table
        for a typo; and the daemon reads the file at start-up, so it never starts on a bad one."""
        try:
            records = self.read()
        except TokenFileError as e:
            if e.message != self._problem:
                self._problem = e.message
                log.error("token_file_invalid", path=str(self.path), problem=e.message)
            return self._good
        self._problem = None
        return records

    def still_valid(self, principal: Principal) -> bool:
        """False once the token a session authenticated with has been revoked."""
        if not principal.key.startswith("token:"):
            return True
        records = self.load()
        if records is not self._ids[0]:
            self._ids = (records, frozenset(r.id for r in records))
        return principal.key.removeprefix("token:") in self._ids[1]

    def _save(self, records: list[TokenRecord]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        # Created 0600 from the start: the file is never readable by others, not even briefly.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump([asdict(r) for r in records], f, indent=1)
        os.replace(temporary, self.path)

    def add(
        self, role: TokenRole, user: str | None = None, *, narrator: bool = False
    ) -> tuple[TokenRecord, str]:
        """Make a token; returns its record and the secret, which is not stored."""
        if role not in ROLES:
            raise AuthError(
                "invalid_value", "role must be one of {roles}", "role", roles=", ".join(ROLES)
            )
        if role == "player" and not user:
            raise AuthError("invalid_value", "a player token is bound to a user id", "user")
        if narrator and role != "bridge":
            raise AuthError("invalid_value", "only a bridge token takes --narrator", "narrator")
        records = self.read()
        if len(records) >= MAX_TOKENS:
            raise AuthError("limit_reached", "at most {limit} tokens", "role", limit=MAX_TOKENS)
        secret = new_secret()
        record = TokenRecord(
            id=secrets.token_hex(4),
            role=role,
            user=user,
            narrator=narrator,
            hash=_digest(secret),
            created=time.time(),
        )
        self._save([*records, record])
        return record, secret

    def revoke(self, token_id: str) -> bool:
        """Remove a token; False if there is none with that id."""
        records = self.read()
        kept = [r for r in records if r.id != token_id]
        if len(kept) == len(records):
            return False
        self._save(kept)
        return True

    def authenticate(self, secret: str) -> Principal | None:
        digest = _digest(secret)
        for r in self.load():
            if hmac.compare_digest(r.hash, digest):
                return Principal(f"token:{r.id}", r.role, r.user, r.narrator)
        return None
