"""One connection and the requests waiting on it (pynvim's AsyncSession): msgids matched to
their answers, one message written at a time, and a reader that hands events on. Once dropped a
connection is never used again: the client (:mod:`.reconnect`) opens a fresh one."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import ByteStream

from .. import wire
from ..errors import CallError, CallTimeoutError
from .limits import CLOSE_TIMEOUT, RECV_BYTES, SEND_TIMEOUT

log = logging.getLogger(__name__)


class Dropped(Exception):  # noqa: N818 - internal signal, never reaches a caller
    """The connection a request was on dropped before its answer came."""


class Unsent(Dropped):
    """The connection dropped before any of the request was written: the daemon never saw it."""


class Waiter:
    """A request's answer, awaited: ``done`` is set when it comes or the connection drops."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.response: wire.Response | None = None


class Connection:
    """One socket, said hello on, and the requests waiting for their answers on it. Once
    dropped it is never used again; the client opens a fresh one."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.pending: dict[int, Waiter] = {}
        self.closed = anyio.Event()
        self.reason = "the daemon closed the connection"
        self.code = ""
        self.reader_scope = anyio.CancelScope()
        self._sending = anyio.Lock()
        self._ids = itertools.count()

    def drop(self, reason: str | None = None, code: str = "") -> None:
        """Mark the connection dead, stop its reader and wake every request waiting on it."""
        if self.closed.is_set():
            return
        if reason is not None:
            self.reason, self.code = reason, code
        self.closed.set()
        self.reader_scope.cancel()
        for waiter in self.pending.values():
            waiter.done.set()

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> wire.Response:
        """Send one request and wait for its answer; ``Dropped`` if the connection dies first
        (``Unsent`` if it died before the request was written)."""
        if self.closed.is_set():
            raise Unsent
        msgid = next(self._ids) % (wire.MAX_MSGID + 1)
        while msgid in self.pending:  # only after wrapping around 2**32 ids
            msgid = next(self._ids) % (wire.MAX_MSGID + 1)
        try:
            data = wire.pack(wire.Request(msgid, method, params))
        except wire.WireError as e:
            # Refused before sending (too large for any daemon): the same error the daemon gives.
            raise CallError(e.code, e.message, e.field) from None
        waiter = Waiter()
        self.pending[msgid] = waiter
        try:
            await self._send(data)
            with anyio.move_on_after(timeout):
                await waiter.done.wait()
        finally:
            del self.pending[msgid]
        if waiter.response is not None:
            return waiter.response
        if self.closed.is_set():
            raise Dropped
        raise CallTimeoutError(f"no answer to {method} within {timeout:g} s")

    async def _send(self, data: bytes) -> None:
        # One message at a time, so the bytes of two never interleave. The lock's wait is
        # bounded: each holder gives up after SEND_TIMEOUT and drops the connection.
        async with self._sending:
            if self.closed.is_set():
                raise Unsent
            # Shielded: a write cut short by a caller's cancellation would leave half a message
            # on the stream and corrupt everything after it.
            with anyio.CancelScope(shield=True):
                try:
                    with anyio.fail_after(SEND_TIMEOUT):
                        await self.stream.send(data)
                except TimeoutError:
                    self.drop(f"a write made no progress for {SEND_TIMEOUT:g} s")
                    raise Dropped from None
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    self.drop()
                    raise Dropped from None

    async def read(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        """The connection's reader, until it drops: answers to their waiters, the params of each
        event notification to ``on_event``, error notifications to the log (a fatal one is why
        the daemon closes the connection next)."""
        decoder = wire.Decoder()
        try:
            with self.reader_scope:
                while True:
                    try:
                        # No deadline: an idle session is normal; a drop ends the wait.
                        chunk = await self.stream.receive(RECV_BYTES)
                    except (
                        anyio.EndOfStream,
                        anyio.BrokenResourceError,
                        anyio.ClosedResourceError,
                        OSError,
                    ):
                        return
                    for item in decoder.feed(chunk):
                        if isinstance(item, wire.WireError):
                            if item.fatal:
                                self.drop(f"the daemon sent unreadable data: {item}", item.code)
                                return
                            log.warning("skipped a bad message from the daemon: %s", item)
                        elif isinstance(item, wire.Response):
                            waiter = self.pending.get(item.msgid)
                            if waiter is not None:  # else its caller timed out or left
                                waiter.response = item
                                waiter.done.set()
                        elif isinstance(item, wire.Notification):
                            self._notified(item, on_event)
                        # A daemon sends no requests in this protocol.
        finally:
            self.drop()
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                await self.stream.aclose()

    def _notified(
        self, note: wire.Notification, on_event: Callable[[dict[str, Any]], None]
    ) -> None:
        params = note.params
        if note.method == "event":
            on_event(params)
        elif note.method == wire.ERROR_NOTIFICATION:
            code, message = str(params.get("code", "")), str(params.get("message", ""))
            if params.get("fatal"):
                # The daemon closes the connection next; this is why.
                self.reason, self.code = f"{code}: {message}", code
            else:
                log.warning("the daemon reported an error: %s: %s", code, message)
        # Other notifications are ignored: a newer daemon may send some.


Ask = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Sends one query and returns its result (or raises its error)."""


async def every_combat(ask: Ask, page: int, after: str | None = None) -> list[dict[str, Any]]:
    """Every ``list_combats`` row after ``after``, read page after page: a daemon answers at
    most a page per request, and ids only sort on, so pages neither miss nor repeat one."""
    rows: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"limit": page}
        if after is not None:
            params["after"] = after
        got = [r for r in await ask("list_combats", params) if after is None or r["combat"] > after]
        rows.extend(got)
        if len(got) < page:
            return rows
        after = got[-1]["combat"]


async def subscribe_everywhere(ask: Ask, page: int) -> dict[str, Any]:
    """``subscribe_all``, its ``seqs`` completed from ``list_combats`` when the daemon names
    only a page of combats in its answer. A combat's seq read later is no less than at the
    answer, and its events in between came as notifications before the page that names it."""
    result = dict(await ask("subscribe_all", {"limit": page}))
    if result.get("more"):
        seqs = dict(result["seqs"])
        for row in await every_combat(ask, page, result["until"]):
            if "quarantined" not in row:
                seqs[row["combat"]] = row["seq"]
        result["seqs"] = seqs
    return result


def result(response: wire.Response) -> Any:
    """The one place an error response becomes an exception."""
    error = response.error
    if error is not None:
        raise CallError(error.code, error.message, error.field)
    return response.result
