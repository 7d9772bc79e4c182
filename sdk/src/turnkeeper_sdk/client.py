"""A small synchronous client for scripts, tools and tests: one socket, one call at a time.

A command called without ``request_id`` gets a fresh one (a uuid4 hex), as with the async
client: ``client.call("start_combat", combat="c1")`` just works. Give your own ``request_id``
when a command may be sent again (a retry after a lost connection): the daemon applies a
request id at most once.

Notifications (events, errors) that arrive while a call waits are kept, in order, for
:meth:`Client.notification`. For a long-lived session (reconnection, typed methods, event
subscriptions) use the asynchronous client, :mod:`turnkeeper_sdk.aio`.
"""

from __future__ import annotations

import itertools
import socket
import uuid
from pathlib import Path
from typing import Any, Protocol

from . import wire
from .errors import CallError
from .methods import METHODS

__all__ = [
    "CALL_TIMEOUT",
    "FALLBACK_COMBAT_PAGE",
    "MAX_KEPT_NOTIFICATIONS",
    "CallError",
    "Client",
    "Stream",
]

CALL_TIMEOUT = 30.0
"""Seconds a call waits for its answer before the connection is considered dead."""
MAX_KEPT_NOTIFICATIONS = 100_000
"""Notifications kept unread; past this the client raises rather than grow without bound."""
RECV_BYTES = 65536
"""Bytes read per receive: large enough for a typical reply in one system call."""
FALLBACK_COMBAT_PAGE = 100
"""``list_combats`` page size when the daemon's hello names none: within every daemon's bound."""


class Stream(Protocol):
    """What the client needs of a connection: a socket, or anything with a socket's face (a
    WebSocket whose ``recv`` returns the bytes of its binary messages)."""

    def sendall(self, data: bytes, /) -> None: ...
    def recv(self, size: int, /) -> bytes: ...
    def settimeout(self, timeout: float | None, /) -> None: ...
    def close(self) -> None: ...


class Client:
    """One connection to a Turnkeeper daemon."""

    def __init__(self, sock: Stream, timeout: float = CALL_TIMEOUT) -> None:
        self.sock = sock
        self.sock.settimeout(timeout)
        self._decoder = wire.Decoder()
        self._ids = itertools.count(1)
        self._incoming: list[wire.Message | wire.WireError] = []
        self.notes: list[wire.Notification] = []
        self.limits: dict[str, Any] = {}
        """The daemon's limits, as its answer to :meth:`hello` named them."""

    @classmethod
    def unix(cls, path: Path | str, timeout: float = CALL_TIMEOUT) -> Client:
        """Connect to the daemon's Unix socket at ``path`` (say hello next)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(str(path))
        return cls(sock, timeout)

    @classmethod
    def tcp(cls, host: str, port: int, timeout: float = CALL_TIMEOUT) -> Client:
        """Connect to the daemon over TCP (say hello next, with a token)."""
        return cls(socket.create_connection((host, port), timeout=timeout), timeout)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _next(self) -> wire.Message | wire.WireError:
        while not self._incoming:
            data = self.sock.recv(RECV_BYTES)
            if not data:
                raise EOFError("the daemon closed the connection")
            self._incoming.extend(self._decoder.feed(data))
        return self._incoming.pop(0)

    def _keep(self, note: wire.Notification) -> None:
        if len(self.notes) >= MAX_KEPT_NOTIFICATIONS:
            raise OverflowError("too many unread notifications")
        self.notes.append(note)

    def send(self, data: bytes) -> None:
        """Send raw bytes (for tools that speak the protocol by hand)."""
        self.sock.sendall(data)

    def response(self, msgid: int) -> wire.Response:
        """Read until the response to ``msgid``, keeping the notifications met on the way."""
        while True:
            item = self._next()
            if isinstance(item, wire.WireError):
                raise item
            if isinstance(item, wire.Response) and item.msgid == msgid:
                return item
            if isinstance(item, wire.Notification):
                self._keep(item)

    def call(self, method: str, **params: Any) -> Any:
        """Call a method with named params; return its result or raise ``CallError``. A
        command without ``request_id`` gets a fresh one."""
        known = METHODS.get(method)
        if known is not None and known.kind == "command":
            params.setdefault("request_id", uuid.uuid4().hex)
        msgid = next(self._ids) % (wire.MAX_MSGID + 1)
        self.sock.sendall(wire.pack(wire.Request(msgid, method, params)))
        answer = self.response(msgid)
        if answer.error is not None:
            error = answer.error
            raise CallError(error.code, error.message, error.field)
        return answer.result

    def notification(self) -> wire.Notification:
        """The next notification, waiting for one if none is kept."""
        if self.notes:
            return self.notes.pop(0)
        while True:
            item = self._next()
            if isinstance(item, wire.WireError):
                raise item
            if isinstance(item, wire.Notification):
                return item

    def hello(
        self,
        token: str | None = None,
        name: str = "script",
        kind: str = "tool",
        locale: str | None = None,
        narrate: bool = False,
    ) -> Any:
        """Open the session at this client's protocol level; returns the hello result.
        ``locale`` asks for the daemon's messages in that language; ``narrate`` for each event's
        ``summary``, a line of the narrated log in that language."""
        params: dict[str, Any] = {
            "protocol": wire.PROTOCOL_VERSION,
            "client": {"name": name, "kind": kind},
        }
        if token is not None:
            params["token"] = token
        if locale is not None:
            params["locale"] = locale
        if narrate:
            params["narrate"] = True
        result = self.call("hello", **params)
        limits = result.get("limits") if isinstance(result, dict) else None
        self.limits = limits if isinstance(limits, dict) else {}
        return result

    def list_combats(self) -> list[dict[str, Any]]:
        """Every combat's ``list_combats`` row, in id order, read a page at a time: a daemon
        answers at most a page per request."""
        page = self.limits.get("max_combat_page")
        if not isinstance(page, int) or page < 1:
            page = FALLBACK_COMBAT_PAGE
        rows: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page}
            if after is not None:
                params["after"] = after
            got = [
                r
                for r in self.call("list_combats", **params)
                if after is None or r["combat"] > after
            ]
            rows.extend(got)
            if len(got) < page:
                return rows
            after = got[-1]["combat"]
