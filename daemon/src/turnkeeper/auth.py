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

from turnkeeper_engine import Actor
from turnkeeper_engine.errors import Arg, TemplatedError

TokenRole = Literal["narrator", "player", "observer", "bridge"]
ROLES: tuple[TokenRole, ...] = ("narrator", "player", "observer", "bridge")
TOKEN_FILE = "tokens.json"
TOKEN_BYTES = 32
"""256 bits of secret: guessing is hopeless, and it still fits on a line."""
MAX_TOKENS = 10_000
"""The file is read whole at each start; a table has a handful of tokens, a server hundreds."""


class AuthError(TemplatedError):
    """A refused identity or token change: ``code``, ``message`` and ``field``, the message a
    string-literal template with named arguments (like ``RequestError``)."""

    def __init__(self, code: str, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(template, args)
        self.code = code
        self.field = field


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


class Tokens:
    """The token file of a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / TOKEN_FILE
        self._cache: tuple[tuple[int, int], list[TokenRecord]] | None = None

    def load(self) -> list[TokenRecord]:
        """The tokens, re-read only when the file changed (a revocation takes effect at once,
        without a read of the file per request)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_size)
        if self._cache is None or self._cache[0] != stamp:
            raw = json.loads(self.path.read_text())
            self._cache = (stamp, [TokenRecord(**item) for item in raw[:MAX_TOKENS]])
        return self._cache[1]

    def still_valid(self, principal: Principal) -> bool:
        """False once the token a session authenticated with has been revoked."""
        if not principal.key.startswith("token:"):
            return True
        token_id = principal.key.removeprefix("token:")
        return any(r.id == token_id for r in self.load())

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
        records = self.load()
        if len(records) >= MAX_TOKENS:
            raise AuthError("limit_reached", "at most {limit} tokens", "role", limit=MAX_TOKENS)
        secret = secrets.token_urlsafe(TOKEN_BYTES)
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
        records = self.load()
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
