"""The asynchronous client (anyio): typed methods, event subscriptions and automatic reconnection.

One shape: build the client with :meth:`AsyncClient.unix` or :meth:`AsyncClient.tcp` and enter
it with ``async with``; entering connects and says hello, leaving closes::

    async with AsyncClient.unix(socket_path) as client:  # the daemon's own uid: narrator
        await client.create_combat(combat_id="c1", ruleset="marvel")
        await client.add_combatant("c1", id="hero", display_name="Hero", faces=(6, 6, 6))
        await client.start_combat("c1")
        async with client.subscribe("c1", after=0) as events:
            async for event in events:  # {"combat": "c1", "seq": 1, "event": ..., ...}
                ...

    async with AsyncClient.tcp("127.0.0.1", 7411, token=secret) as client:
        ...

A refused hello on entering raises :class:`CallError` (``unauthenticated``, say); a daemon that
cannot be reached raises :class:`ConnectionLost`.

**Methods.** One per protocol method, named after it. Session and queries: ``hello`` (the
hello result of the current connection: the client says hello itself), ``list_combats``,
``get_combat``, ``history``, ``subscribe``, ``unsubscribe``, ``subscribe_all``,
``unsubscribe_all``, ``list_plugins``. Every engine command is a method whose keyword
parameters are the command's fields (``turnkeeper_engine.commands``), taking the engine's values
(``TurnRef``, ``ActionSpec``, ``Trigger``, ``TriggerFacts``) or the same as plain maps; plus
``combat`` (first, positional; ``create_combat`` names its combat with ``combat_id`` instead),
``request_id`` and ``as_user`` (sent as ``as``: the user a bridge acts for). A command without
``request_id`` gets a fresh one (a uuid4 hex). Fields left at their defaults are not sent.
:meth:`~AsyncClient.call` calls any query or command by its wire name.

**Results** are the protocol's plain data, as decoded: a command returns a
:class:`CommandResult` ``{"combat", "seq", "events"}``, ``get_combat`` a :class:`CombatSnapshot`,
``history`` a :class:`HistoryPage` (typed dicts: keys a newer daemon adds are kept), the other
queries a dict or list as protocol.md describes.

**Errors** (:mod:`turnkeeper_sdk.errors`): an error response raises :class:`CallError` with the
protocol's ``code``, ``message`` and ``field``; every other failure is a
:class:`TurnkeeperError` too (:class:`ConnectionLost`, :class:`CallTimeoutError`,
:class:`TooFarBehindError`).

**Subscriptions.** ``subscribe(combat, after=seq)`` and ``subscribe_all()`` return a
:class:`Subscription`: enter it with ``async with`` (that sends the request; ``.result`` is then
the daemon's answer) and iterate it for event dicts, each with ``combat``, ``seq``, ``event`` and
the event's fields, in seq order per combat. Leaving the block unsubscribes. Each subscription
buffers at most ``event_buffer`` unread events (and, while it fills a gap from ``history``
after a reconnect, as many live events kept aside); an event that finds either full ends it:
the buffered events are still delivered, then :class:`TooFarBehindError` is raised, naming the
last seq delivered per combat. Waiting for the next event has no deadline (a quiet combat is
no fault): bound it with ``anyio.move_on_after`` where needed.

**Reconnection.** When the connection drops (the daemon restarted, was killed, or closed it as
``slow_consumer``), the client reconnects with bounded, randomised backoff for at most
``reconnect_timeout`` seconds, says hello again with the same credentials, subscribes every open
subscription again from the last seq it delivered (``subscribe_all`` fills the gap from
``history``), so no event is missed or duplicated, and then sends every request still waiting
for its answer again: a command with the same ``request_id``, so the daemon applies it at most
once (it remembers request ids per principal, across restarts), a query as it was. Requests sent
again across a reconnect keep no promised order among themselves: await a command before
sending one that depends on it. A command refused as ``shutting_down`` is sent again the same
way once the daemon is back. If reconnecting does not succeed in time, or the daemon refuses the
repeated hello, every waiter and subscription gets :class:`ConnectionLost`; a command that ends
with ``ConnectionLost`` or ``CallTimeoutError`` carries its ``request_id`` for a safe manual
retry.

Every wait is bounded (the named constants below) except waiting for the next event. The
library logs to the ``turnkeeper_sdk.aio`` logger and never configures logging.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Self, TypedDict, cast

import anyio
from anyio.abc import ByteStream, TaskGroup

from turnkeeper_engine.commands import COMMANDS
from turnkeeper_engine.model import (
    ActionSpec,
    Boundary,
    OptionValue,
    Trigger,
    TriggerFacts,
    TurnRef,
)
from turnkeeper_engine.plain import to_plain

from . import wire
from .errors import CallError, CallTimeoutError, ConnectionLost, TooFarBehindError, TurnkeeperError

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "CALL_TIMEOUT",
    "CLOSE_TIMEOUT",
    "CONNECT_TIMEOUT",
    "EVENT_BUFFER",
    "MAX_SENDS",
    "RECONNECT_TIMEOUT",
    "SEND_TIMEOUT",
    "AsyncClient",
    "CallError",
    "CallTimeoutError",
    "CombatSnapshot",
    "CommandResult",
    "ConnectionLost",
    "Event",
    "HistoryPage",
    "Subscription",
    "TooFarBehindError",
    "TurnkeeperError",
]

log = logging.getLogger(__name__)

CALL_TIMEOUT = 30.0
"""Seconds a request waits for its answer on an open connection. The daemon answers requests in
order and gives a reply up to 30 s to be queued (its ``SEND_TIMEOUT``); a longer silence means
something is wrong, and the caller hears of it (:class:`CallTimeoutError`)."""

RECONNECT_TIMEOUT = 30.0
"""Seconds the client keeps trying to reconnect after a drop before it gives up
(:class:`ConnectionLost`): a restarted daemon listens again within a second or two, so this
leaves room for a slow restart while a daemon that is gone for good is reported in bounded time."""

CONNECT_TIMEOUT = 10.0
"""Seconds one connection attempt may take: a local socket connects at once, and a silent TCP
host must not use up the whole reconnect budget in a single try."""

SEND_TIMEOUT = 10.0
"""Seconds one message may take to be written. The daemon reads requests as they come, so a
write that makes no progress this long means it stopped reading: the connection is dropped and
brought back."""

CLOSE_TIMEOUT = 5.0
"""Seconds cleanup may take (an unsubscribe when a subscription is left, closing a socket). It is
shielded from cancellation, so a cancelled caller still leaves the session tidy, and bounded, so
it never holds that caller up for long."""

BACKOFF_FIRST = 0.05
"""First pause between reconnect attempts: a restarted daemon listens within a fraction of a
second, so the first retries come quickly."""

BACKOFF_MAX = 2.0
"""Longest pause between reconnect attempts (the pause doubles up to it): a daemon that is down
for a while is tried every couple of seconds, not in a tight loop. Each pause is randomly
shortened by up to half so that the clients of a restarted daemon do not return in lockstep."""

MAX_SENDS = 5
"""Times one request is sent, each on a fresh connection after the last one dropped before the
answer came. A request that outlives this many connections is more likely what breaks them than
unlucky: its caller gets :class:`ConnectionLost` instead of an endless retry loop."""

EVENT_BUFFER = 1024
"""Unread events one subscription holds. The daemon queues at most 1024 messages for a
connection (``OUTBOX_MESSAGES``) and drops one that falls further behind, so a larger buffer
would not help a slow consumer; it also holds a whole catch-up (at most 1000 events)."""

FALLBACK_HISTORY_PAGE = 100
"""``history`` page size when a daemon's hello names none: within every daemon's bound."""

FALLBACK_COMBAT_PAGE = 100
"""``list_combats`` page size when a daemon's hello names none: within every daemon's bound."""

RECV_BYTES = 65536
"""Bytes read per receive: a typical reply or burst of events in one system call."""

Event = dict[str, Any]
"""An event as delivered to a subscriber: ``{"combat", "seq", "event", ...its fields}``."""


class CommandResult(TypedDict):
    """An accepted command: its combat, the combat's last seq after it, and the command's events
    as the caller may see them (``{"seq", "event", ...fields}``, the first ``command_recorded``).
    A ``tick`` with nothing due has no events and the unchanged seq."""

    combat: str
    seq: int
    events: list[dict[str, Any]]


class CombatSnapshot(TypedDict):
    """``get_combat``'s result: the combat's ``view`` as the caller may see it, at ``seq``."""

    combat: str
    seq: int
    view: dict[str, Any]


class HistoryPage(TypedDict):
    """``history``'s result: events after ``after`` up to ``until`` (page on from ``until``
    until it reaches ``seq``, the combat's last seq), each ``{"seq", "event", ...fields}``."""

    combat: str
    seq: int
    until: int
    events: list[dict[str, Any]]


_SUBSCRIPTION_METHODS = frozenset(
    {"hello", "subscribe", "unsubscribe", "subscribe_all", "unsubscribe_all"}
)
"""Methods whose state the client keeps across reconnects: only their own methods send them."""


class _Dropped(Exception):  # noqa: N818 - internal signal, never reaches a caller
    """The connection a request was on dropped before its answer came."""


class _Waiter:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.response: wire.Response | None = None


class _Connection:
    """One socket, said hello on, and the requests waiting for their answers on it. Once
    dropped it is never used again; the client opens a fresh one."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.pending: dict[int, _Waiter] = {}
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
        """Send one request and wait for its answer; ``_Dropped`` if the connection dies first."""
        if self.closed.is_set():
            raise _Dropped
        msgid = next(self._ids) % (wire.MAX_MSGID + 1)
        while msgid in self.pending:  # only after wrapping around 2**32 ids
            msgid = next(self._ids) % (wire.MAX_MSGID + 1)
        try:
            data = wire.pack(wire.Request(msgid, method, params))
        except wire.WireError as e:
            # Refused before sending (too large for any daemon): the same error the daemon gives.
            raise CallError(e.code, e.message, e.field) from None
        waiter = _Waiter()
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
            raise _Dropped
        raise CallTimeoutError(f"no answer to {method} within {timeout:g} s")

    async def _send(self, data: bytes) -> None:
        # One message at a time, so the bytes of two never interleave. The lock's wait is
        # bounded: each holder gives up after SEND_TIMEOUT and drops the connection.
        async with self._sending:
            if self.closed.is_set():
                raise _Dropped
            # Shielded: a write cut short by a caller's cancellation would leave half a message
            # on the stream and corrupt everything after it.
            with anyio.CancelScope(shield=True):
                try:
                    with anyio.fail_after(SEND_TIMEOUT):
                        await self.stream.send(data)
                except TimeoutError:
                    self.drop(f"a write made no progress for {SEND_TIMEOUT:g} s")
                    raise _Dropped from None
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    self.drop()
                    raise _Dropped from None


Ask = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Sends one query and returns its result (or raises its error)."""


async def _every_combat(ask: Ask, page: int, after: str | None = None) -> list[dict[str, Any]]:
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


async def _subscribe_everywhere(ask: Ask, page: int) -> dict[str, Any]:
    """``subscribe_all``, its ``seqs`` completed from ``list_combats`` when the daemon names
    only a page of combats in its answer. A combat's seq read later is no less than at the
    answer, and its events in between came as notifications before the page that names it."""
    result = dict(await ask("subscribe_all", {"limit": page}))
    if result.get("more"):
        seqs = dict(result["seqs"])
        for row in await _every_combat(ask, page, result["until"]):
            if "quarantined" not in row:
                seqs[row["combat"]] = row["seq"]
        result["seqs"] = seqs
    return result


def _result(response: wire.Response) -> Any:
    """The one place an error response becomes an exception."""
    error = response.error
    if error is not None:
        raise CallError(error.code, error.message, error.field)
    return response.result


def _new_request_id() -> str:
    return uuid.uuid4().hex


def _plain(value: Any) -> Any:
    """An engine value (record, tuple), or plain data holding some, as wire data."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return to_plain(value)


def _pairs(
    value: Mapping[str, OptionValue] | Sequence[tuple[str, OptionValue]],
) -> Sequence[tuple[str, OptionValue]]:
    """``[name, value]`` pairs (how options travel), from a map or from pairs."""
    return list(value.items()) if isinstance(value, Mapping) else value


class Subscription:
    """The events of one combat (``subscribe``) or of every combat (``subscribe_all``).

    Enter it with ``async with`` to subscribe (``result`` is then the daemon's answer:
    ``{"combat", "seq"}`` or ``{"seqs"}``), iterate it with ``async for`` for event dicts, leave
    the block to unsubscribe. Iteration ends when the subscription is left or unsubscribed; it
    raises :class:`TooFarBehindError` or :class:`ConnectionLost` once the events delivered
    before the failure have been read.
    """

    def __init__(self, client: AsyncClient, combat: str | None, after: int, size: int) -> None:
        self.combat = combat
        """The combat followed, or ``None`` for every combat."""
        self.result: dict[str, Any] = {}
        """The daemon's answer to the subscription request, once entered."""
        self._client = client
        self._after = after
        self._size = size
        self._send, self._receive = anyio.create_memory_object_stream[Event](size)
        # The last seq delivered per combat: events at or below it are not delivered again.
        self._last: dict[str, int] = {} if combat is None else {combat: after}
        self._held: list[Event] | None = None
        self._confirmed = False
        self._entered = False
        self._ended = False
        self._error: TurnkeeperError | None = None

    async def __aenter__(self) -> Self:
        self._entered = True
        await self._client._join(self)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._client._leave(self)
        self._receive.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        if not self._entered:
            raise RuntimeError("enter the subscription with `async with` before iterating it")
        try:
            # No deadline: a combat may stay quiet for hours; the end of the subscription or of
            # the connection wakes this wait.
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self._error is not None:
                raise self._error from None
            raise StopAsyncIteration from None

    # The client's side ---------------------------------------------------------------------

    def _last_seq(self, combat: str) -> int:
        return self._last.get(combat, 0)

    def _push(self, event: Event) -> None:
        """An event notification for this subscription, as it arrives."""
        if self._held is None:
            self._deliver(event)
        elif len(self._held) >= self._size:
            self._fail_behind("more live events than it buffers arrived while catching up")
        else:
            self._held.append(event)

    def _deliver(self, event: Event) -> None:
        if self._ended:
            return
        combat, seq = event.get("combat"), event.get("seq")
        if not isinstance(combat, str) or not isinstance(seq, int):
            return  # not an event this client can place; a newer daemon's business
        if seq <= self._last.get(combat, 0):
            return  # delivered already: a catch-up overlapping what came before
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:
            self._fail_behind(f"its buffer of {self._size} unread events was full")
            return
        self._last[combat] = seq

    def _hold(self) -> None:
        """Keep live events aside while a gap before them is filled from history."""
        self._held = []

    def _release(self) -> None:
        held, self._held = self._held or [], None
        for event in held:
            self._deliver(event)

    def _fail_behind(self, why: str) -> None:
        what = self.combat or "every combat"
        self._end(
            TooFarBehindError(f"the subscription to {what} fell behind: {why}", dict(self._last))
        )

    def _end(self, error: TurnkeeperError | None) -> None:
        if not self._ended:
            self._ended = True
            self._error = error
            self._send.close()


class AsyncClient:
    """A session with a Turnkeeper daemon that survives reconnects; see the module docstring.

    Build it with :meth:`unix` or :meth:`tcp` and enter it with ``async with``. ``connect`` opens
    a fresh byte stream to the daemon each time it is called (for other transports). ``token``
    is presented at every hello; ``name`` and ``kind`` tell the daemon what the client is;
    ``locale`` (a BCP 47 tag such as ``"pt-BR"``) asks for the daemon's messages in that language.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[ByteStream]],
        *,
        token: str | None = None,
        name: str = "turnkeeper-sdk",
        kind: str = "tool",
        locale: str | None = None,
        call_timeout: float = CALL_TIMEOUT,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
        event_buffer: int = EVENT_BUFFER,
    ) -> None:
        if event_buffer < 1:
            raise ValueError(f"event_buffer must be at least 1, not {event_buffer}")
        self.call_timeout = call_timeout
        """Seconds a request waits for its answer on an open connection."""
        self.reconnect_timeout = reconnect_timeout
        """Seconds to reconnect after a drop before giving up; 0 turns reconnecting off."""
        self.event_buffer = event_buffer
        """Unread events each new subscription holds."""
        self._connect = connect
        self._token = token
        self._name = name
        self._kind = kind
        self._locale = locale
        self._hello: dict[str, Any] = {}
        self._conn: _Connection | None = None
        self._changed: anyio.Event
        """Set, and replaced, each time a connection is ready or the client gives up."""
        self._lost: ConnectionLost | None = None
        self._subs: dict[str, Subscription] = {}
        self._all: Subscription | None = None
        self._tg: TaskGroup | None = None

    @classmethod
    def unix(
        cls,
        path: str | os.PathLike[str],
        *,
        token: str | None = None,
        name: str = "turnkeeper-sdk",
        kind: str = "tool",
        locale: str | None = None,
        call_timeout: float = CALL_TIMEOUT,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
        event_buffer: int = EVENT_BUFFER,
    ) -> AsyncClient:
        """A client of the daemon's Unix socket at ``path``. The daemon's own uid is a narrator
        without a token; any other needs ``token``."""

        async def connect() -> ByteStream:
            return await anyio.connect_unix(path)

        return cls(
            connect,
            token=token,
            name=name,
            kind=kind,
            locale=locale,
            call_timeout=call_timeout,
            reconnect_timeout=reconnect_timeout,
            event_buffer=event_buffer,
        )

    @classmethod
    def tcp(
        cls,
        host: str,
        port: int,
        *,
        token: str | None = None,
        name: str = "turnkeeper-sdk",
        kind: str = "tool",
        locale: str | None = None,
        call_timeout: float = CALL_TIMEOUT,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
        event_buffer: int = EVENT_BUFFER,
    ) -> AsyncClient:
        """A client of the daemon's TCP listener; every TCP client needs a ``token``."""

        async def connect() -> ByteStream:
            return await anyio.connect_tcp(host, port)

        return cls(
            connect,
            token=token,
            name=name,
            kind=kind,
            locale=locale,
            call_timeout=call_timeout,
            reconnect_timeout=reconnect_timeout,
            event_buffer=event_buffer,
        )

    # Lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("this client has been entered already")
        self._changed = anyio.Event()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            try:
                self._conn = await self._open()
            except (OSError, TimeoutError) as e:
                raise ConnectionLost(f"cannot connect to the daemon: {e}") from e
            except _Dropped:
                raise ConnectionLost("the daemon closed the connection before hello") from None
        except BaseException:
            await self._shut()
            raise
        self._tg.start_soon(self._supervise)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._shut()

    async def _shut(self) -> None:
        self._give_up(ConnectionLost("the client is closed"))
        if self._conn is not None:
            self._conn.drop("the client is closed")
        tg = self._tg
        assert tg is not None
        tg.cancel_scope.cancel()
        # The caller's own exception, if any, propagates as it is: the task group is told none,
        # so it does not wrap it in an exception group.
        await tg.__aexit__(None, None, None)

    @property
    def session(self) -> dict[str, Any]:
        """The current session: ``{"role", "user", "connection", "locale"}`` from its hello."""
        return dict(self._hello.get("session") or {})

    # Connections ---------------------------------------------------------------------------

    async def _open(self) -> _Connection:
        """A fresh connection with its reader running and hello said."""
        with anyio.fail_after(CONNECT_TIMEOUT):
            stream = await self._connect()
        conn = _Connection(stream)
        assert self._tg is not None
        self._tg.start_soon(self._read, conn)
        params: dict[str, Any] = {
            "protocol": wire.PROTOCOL_VERSION,
            "client": {"name": self._name, "kind": self._kind},
        }
        if self._token is not None:
            params["token"] = self._token
        if self._locale is not None:
            params["locale"] = self._locale
        try:
            self._hello = _result(await conn.request("hello", params, self.call_timeout))
        except BaseException:
            conn.drop("hello failed")
            raise
        return conn

    async def _read(self, conn: _Connection) -> None:
        """The connection's reader: answers to their waiters, events to their subscriptions."""
        decoder = wire.Decoder()
        try:
            with conn.reader_scope:
                while True:
                    try:
                        # No deadline: an idle session is normal; a drop ends the wait.
                        chunk = await conn.stream.receive(RECV_BYTES)
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
                                conn.drop(f"the daemon sent unreadable data: {item}", item.code)
                                return
                            log.warning("skipped a bad message from the daemon: %s", item)
                        elif isinstance(item, wire.Response):
                            waiter = conn.pending.get(item.msgid)
                            if waiter is not None:  # else its caller timed out or left
                                waiter.response = item
                                waiter.done.set()
                        elif isinstance(item, wire.Notification):
                            self._notified(conn, item)
                        # A daemon sends no requests in this protocol.
        finally:
            conn.drop()
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
                await conn.stream.aclose()

    def _notified(self, conn: _Connection, note: wire.Notification) -> None:
        params = note.params
        if note.method == "event":
            combat = params.get("combat")
            sub = self._subs.get(combat) if isinstance(combat, str) else None
            if sub is not None:
                sub._push(params)
            if self._all is not None:
                # A copy: each subscriber may keep or change what it receives.
                self._all._push(dict(params))
        elif note.method == wire.ERROR_NOTIFICATION:
            code, message = str(params.get("code", "")), str(params.get("message", ""))
            if params.get("fatal"):
                # The daemon closes the connection next; this is why.
                conn.reason, conn.code = f"{code}: {message}", code
            else:
                log.warning("the daemon reported an error: %s: %s", code, message)
        # Other notifications are ignored: a newer daemon may send some.

    async def _connection(self) -> _Connection:
        """The open connection, waiting (at most ``reconnect_timeout``) for a reconnect."""
        with anyio.move_on_after(self.reconnect_timeout):
            while True:
                if self._lost is not None:
                    raise ConnectionLost(str(self._lost), self._lost.code)
                conn = self._conn
                if conn is None:
                    raise RuntimeError("enter the client with `async with` first")
                if not conn.closed.is_set():
                    return conn
                await self._changed.wait()
        raise ConnectionLost(f"not reconnected within {self.reconnect_timeout:g} s")

    async def _supervise(self) -> None:
        """Bring the session back after every drop, until the client closes or gives up."""
        while True:
            conn = self._conn
            assert conn is not None
            # No deadline: a healthy session stays open for as long as it is used.
            await conn.closed.wait()
            if self._lost is not None:
                return
            log.info("connection lost (%s); reconnecting", conn.reason)
            try:
                self._conn = await self._reconnect(conn)
            except ConnectionLost as lost:
                log.warning("giving up: %s", lost)
                self._give_up(lost)
                return
            except Exception as e:
                # A bug here must not take the caller's task group down: report it and stop.
                log.exception("reconnecting failed")
                self._give_up(ConnectionLost(f"reconnecting failed: {e!r}"))
                return
            log.info("reconnected")
            self._changed.set()
            self._changed = anyio.Event()

    async def _reconnect(self, old: _Connection) -> _Connection:
        delay = BACKOFF_FIRST
        failure: BaseException | None = None
        with anyio.move_on_after(self.reconnect_timeout):
            while True:
                try:
                    conn = await self._open()
                except CallError as refused:
                    # The daemon is there but refuses these credentials now (a revoked token,
                    # say): trying again cannot help.
                    raise ConnectionLost(
                        f"{old.reason}; hello was refused on reconnecting: {refused}",
                        refused.code,
                    ) from refused
                except (OSError, TimeoutError, _Dropped) as e:
                    failure = e
                else:
                    try:
                        await self._resubscribe(conn)
                        return conn
                    except (TimeoutError, _Dropped) as e:
                        conn.drop()
                        failure = e
                    except BaseException:
                        conn.drop()  # out of time, or a bug: never leave a half-restored session
                        raise
                await anyio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, BACKOFF_MAX)
        raise ConnectionLost(
            f"{old.reason}; not reconnected within {self.reconnect_timeout:g} s", old.code
        ) from failure

    async def _resubscribe(self, conn: _Connection) -> None:
        """Follow again, on a fresh connection, what was followed: each combat from the last seq
        its subscription delivered, so nothing is missed and nothing comes twice."""
        for combat, sub in list(self._subs.items()):
            if not sub._confirmed or sub._ended:
                continue  # one still being opened is sent again by its own caller
            params = {"combat": combat, "after": sub._last_seq(combat)}
            try:
                _result(await conn.request("subscribe", params, self.call_timeout))
            except CallError as refused:
                if refused.code == "too_far_behind":
                    sub._fail_behind(f"too far behind to resume after a reconnect ({refused})")
                else:
                    sub._end(refused)
                continue
            if self._subs.get(combat) is not sub:  # left while this was being sent
                await self._unfollow(conn, "unsubscribe", {"combat": combat})
        everything = self._all
        if everything is not None and everything._confirmed and not everything._ended:
            await self._resubscribe_all(conn, everything)

    async def _resubscribe_all(self, conn: _Connection, sub: Subscription) -> None:
        """``subscribe_all`` has no ``after``: subscribe, then read what each combat recorded
        while disconnected from ``history``, holding live events back until the gap is filled."""
        sub._hold()

        async def ask(method: str, params: dict[str, Any]) -> Any:
            return _result(await conn.request(method, params, self.call_timeout))

        try:
            seqs = (await _subscribe_everywhere(ask, self._limit("max_combat_page")))["seqs"]
        except CallError as refused:
            sub._end(refused)
            return
        page = self._limit("max_history_page")
        for combat, seq in seqs.items():
            after = sub._last_seq(combat)
            while after < seq and not sub._ended:
                params = {"combat": combat, "after": after, "limit": page}
                try:
                    got = _result(await conn.request("history", params, self.call_timeout))
                except CallError as refused:
                    if refused.code == "combat_quarantined":
                        break  # unreadable for everyone until the operator repairs it
                    sub._end(refused)
                    return
                for event in got["events"]:
                    sub._deliver({"combat": combat, **event})
                if got["until"] <= after:
                    break
                after = got["until"]
        sub._release()
        if self._all is not sub:  # left while this was being sent
            await self._unfollow(conn, "unsubscribe_all", {})

    async def _unfollow(self, conn: _Connection, method: str, params: dict[str, Any]) -> None:
        """Stop the daemon's events for a subscription left here; best effort, bounded."""
        # Shielded: a subscription left because its task was cancelled must still be stopped,
        # or a later subscribe to the same combat would be refused as already_subscribed.
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLOSE_TIMEOUT),
            contextlib.suppress(TurnkeeperError, _Dropped),
        ):
            await conn.request(method, params, CLOSE_TIMEOUT)

    def _give_up(self, lost: ConnectionLost) -> None:
        if self._lost is not None:
            return
        self._lost = lost
        for sub in [*self._subs.values(), *([self._all] if self._all else [])]:
            sub._end(ConnectionLost(str(lost), lost.code))
        if self._tg is not None:
            self._changed.set()

    # Requests ------------------------------------------------------------------------------

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request until it is answered, over reconnects; its result, or the error."""
        request_id = params.get("request_id") if method in COMMANDS else None
        try:
            for _ in range(MAX_SENDS):
                conn = await self._connection()
                try:
                    response = await conn.request(method, params, self.call_timeout)
                except _Dropped:
                    continue  # sent again on the next connection, a command as the same request
                error = response.error
                if error is not None and error.code == "shutting_down":
                    # The daemon is stopping and closes this connection once its commands
                    # drain; the command goes again to the daemon that comes back.
                    with anyio.move_on_after(self.call_timeout):
                        await conn.closed.wait()
                    if conn.closed.is_set():
                        continue
                return _result(response)
            raise ConnectionLost(
                f"{method}: the connection dropped {MAX_SENDS} times before the answer"
            )
        except (ConnectionLost, CallTimeoutError) as e:
            e.request_id = request_id
            raise

    async def call(self, method: str, **params: Any) -> Any:
        """Call a query or command by its wire name with its wire params; return its result.

        A command without ``request_id`` gets a fresh one. ``hello`` and the subscription
        methods are refused here (``ValueError``): use their own methods, which keep the state
        the client restores after a reconnect.
        """
        if method in _SUBSCRIPTION_METHODS:
            raise ValueError(f"use AsyncClient.{method}() rather than call({method!r})")
        if method in COMMANDS:
            params.setdefault("request_id", _new_request_id())
        return await self._call(method, params)

    async def _command(
        self,
        name: str,
        combat: str | None,
        request_id: str | None,
        as_user: str | None,
        fields: dict[str, Any],
    ) -> CommandResult:
        """Send the command ``name``: the envelope, then every field not at its default."""
        params: dict[str, Any] = {"request_id": request_id or _new_request_id()}
        if combat is not None:
            params["combat"] = combat
        if as_user is not None:
            params["as"] = as_user
        for field in dataclasses.fields(COMMANDS[name]):
            value = _plain(fields[field.name])
            # A default left out means the same and keeps working with daemons that predate the
            # field (the API contract only ever adds optional fields).
            if field.default is dataclasses.MISSING or value != _plain(field.default):
                params[field.name] = value
        return cast(CommandResult, await self._call(name, params))

    # Subscriptions -------------------------------------------------------------------------

    async def _join(self, sub: Subscription) -> None:
        combat = sub.combat
        if (self._all if combat is None else self._subs.get(combat)) is not None:
            raise CallError(
                "already_subscribed",
                "this client follows it already",
                "combat" if combat is not None else "method",
            )
        if combat is None:
            self._all = sub
        else:
            self._subs[combat] = sub
        try:
            if combat is None:
                await self._connection()  # its hello names the daemon's page size
                page = self._limit("max_combat_page")
                sub.result = await _subscribe_everywhere(self._call, page)
                for name, seq in sub.result["seqs"].items():
                    sub._last[name] = max(sub._last_seq(name), seq)
            else:
                sub.result = await self._call("subscribe", {"combat": combat, "after": sub._after})
        except BaseException:
            await self._leave(sub)
            raise
        sub._confirmed = True

    async def _leave(self, sub: Subscription, *, tell_daemon: bool = True) -> None:
        sub._end(None)
        if sub.combat is None:
            if self._all is not sub:
                return
            self._all = None
            method, params = "unsubscribe_all", {}
        else:
            if self._subs.get(sub.combat) is not sub:
                return
            del self._subs[sub.combat]
            method, params = "unsubscribe", {"combat": sub.combat}
        conn = self._conn
        # A dropped connection took its subscriptions with it, and the reconnect skips this one.
        if tell_daemon and conn is not None and not conn.closed.is_set():
            await self._unfollow(conn, method, params)

    # Session and queries -------------------------------------------------------------------

    async def hello(self) -> dict[str, Any]:
        """The hello result of the current connection (protocol, server, session, methods,
        events, limits). The client says hello itself on every connection, with its token; the
        daemon would refuse a second one (``hello_repeated``)."""
        await self._connection()
        return dict(self._hello)

    async def list_combats(
        self, *, after: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Combats in id order: ``{"combat", "ruleset", "phase", "round", "seq"}``, or
        ``{"combat", "quarantined"}`` for a quarantined one. Those whose ids sort after
        ``after`` (every one by default); with ``limit``, one page of at most that many
        (page on with ``after`` = the last row's ``combat``), otherwise all of them, read a
        page at a time."""
        if limit is not None:
            params: dict[str, Any] = {"limit": limit}
            if after is not None:
                params["after"] = after
            return cast(list[dict[str, Any]], await self._call("list_combats", params))
        await self._connection()
        return await _every_combat(self._call, self._limit("max_combat_page"), after)

    def _limit(self, name: str) -> int:
        """A page size the daemon's hello names (``max_combat_page``, ``max_history_page``),
        or one every daemon takes."""
        limits = self._hello.get("limits")
        value = limits.get(name) if isinstance(limits, dict) else None
        if isinstance(value, int) and value >= 1:
            return value
        return FALLBACK_COMBAT_PAGE if name == "max_combat_page" else FALLBACK_HISTORY_PAGE

    async def get_combat(self, combat: str) -> CombatSnapshot:
        """A combat as the caller may see it, with the last seq its view includes."""
        return cast(CombatSnapshot, await self._call("get_combat", {"combat": combat}))

    async def history(
        self, combat: str, *, after: int = 0, limit: int | None = None
    ) -> HistoryPage:
        """Recorded events after ``after`` as the caller may see them; ``limit`` (1 to 1000)
        recorded events at most, the daemon's default (100) if not given."""
        params: dict[str, Any] = {"combat": combat, "after": after}
        if limit is not None:
            params["limit"] = limit
        return cast(HistoryPage, await self._call("history", params))

    def subscribe(self, combat: str, *, after: int = 0) -> Subscription:
        """The events of ``combat`` after seq ``after`` (missed ones first, then live ones).

        Use as ``async with client.subscribe(combat, after=seq) as events: async for event in
        events: ...``; entering refuses a combat this client follows already
        (``already_subscribed``), and raises what the daemon answers (``too_far_behind`` more
        than 1000 events back: read ``get_combat`` and subscribe from its ``seq``).
        """
        return Subscription(self, combat, after, self.event_buffer)

    async def unsubscribe(self, combat: str) -> dict[str, Any]:
        """Stop the events of ``combat``: its subscription's iteration ends."""
        sub = self._subs.get(combat)
        if sub is not None:
            await self._leave(sub, tell_daemon=False)
        return cast(dict[str, Any], await self._call("unsubscribe", {"combat": combat}))

    def subscribe_all(self) -> Subscription:
        """The live events of every combat, combats created later included, from the moment of
        the answer on. Use like :meth:`subscribe`; ``result["seqs"]`` then holds each combat's
        last seq (read page after page with ``list_combats`` where the daemon's answer names a
        page only)."""
        return Subscription(self, None, 0, self.event_buffer)

    async def list_plugins(self) -> dict[str, Any]:
        """The daemon's plugins: ``{"loaded": [...], "failed": [...], "skipped": [...]}``, the
        loaded ones with their hooks, what they provide and their call counters."""
        return cast(dict[str, Any], await self._call("list_plugins", {}))

    async def unsubscribe_all(self) -> dict[str, Any]:
        """Stop ``subscribe_all``: its iteration ends; per-combat subscriptions go on."""
        if self._all is not None:
            await self._leave(self._all, tell_daemon=False)
        return cast(dict[str, Any], await self._call("unsubscribe_all", {}))

    # Commands ------------------------------------------------------------------------------
    # Written once from turnkeeper_engine.commands; tests/test_client_methods.py keeps every
    # method's keyword parameters equal to its command's fields.

    async def create_combat(
        self,
        *,
        combat_id: str,
        ruleset: str,
        options: Mapping[str, OptionValue] | Sequence[tuple[str, OptionValue]] = (),
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Opens a combat. Who: narrator."""
        return await self._command(
            "create_combat",
            None,
            request_id,
            as_user,
            {"combat_id": combat_id, "ruleset": ruleset, "options": _pairs(options)},
        )

    async def add_combatant(
        self,
        combat: str,
        *,
        id: str,
        display_name: str,
        controller: str | None = None,
        player_character: bool = False,
        init_mod: int = 0,
        dexterity: int = 10,
        group: str | None = None,
        tags: Sequence[str] = (),
        hidden: bool = False,
        faces: Sequence[int] | None = None,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Adds a combatant in any phase but `ended` (R1). Who: narrator."""
        return await self._command(
            "add_combatant",
            combat,
            request_id,
            as_user,
            {
                "id": id,
                "display_name": display_name,
                "controller": controller,
                "player_character": player_character,
                "init_mod": init_mod,
                "dexterity": dexterity,
                "group": group,
                "tags": tags,
                "hidden": hidden,
                "faces": faces,
            },
        )

    async def remove_combatant(
        self,
        combat: str,
        *,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Takes a combatant out for good; its hold, reservations and pending reaction are
        cancelled and its turn ends (R1). Who: narrator."""
        return await self._command(
            "remove_combatant", combat, request_id, as_user, {"combatant": combatant}
        )

    async def defeat_combatant(
        self,
        combat: str,
        *,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Marks an active combatant defeated; it keeps its place for a revive (R1). Who:
        narrator."""
        return await self._command(
            "defeat_combatant", combat, request_id, as_user, {"combatant": combatant}
        )

    async def revive_combatant(
        self,
        combat: str,
        *,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Brings a defeated combatant back at its place; if its slot has passed this round it
        acts next round (R1). Who: narrator."""
        return await self._command(
            "revive_combatant", combat, request_id, as_user, {"combatant": combatant}
        )

    async def reveal_combatant(
        self,
        combat: str,
        *,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Makes a hidden combatant visible: players and observers receive `combatant_revealed`
        (R16). Who: narrator."""
        return await self._command(
            "reveal_combatant", combat, request_id, as_user, {"combatant": combatant}
        )

    async def mark_surprised(
        self,
        combat: str,
        *,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """marvel, before the combatant's check: it is Surprised and gets one trouble on its
        check (R8). Who: narrator."""
        return await self._command(
            "mark_surprised", combat, request_id, as_user, {"combatant": combatant}
        )

    async def roll_initiative(
        self,
        combat: str,
        *,
        combatant: str,
        faces: Sequence[int] | None = None,
        edges: int = 0,
        troubles: int = 0,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Rolls (or takes `faces` for) a check before the order is fixed; a group member rolls
        for its group (R2–R4). Who: narrator; a player for its own combatant."""
        return await self._command(
            "roll_initiative",
            combat,
            request_id,
            as_user,
            {"combatant": combatant, "faces": faces, "edges": edges, "troubles": troubles},
        )

    async def order_ties(
        self,
        combat: str,
        *,
        combatants: Sequence[str],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """marvel, before the order is fixed: the order exact ties are to take before any
        roll-off (R4). Who: narrator; a player for its own combatant (every one named must be
        its own)."""
        return await self._command(
            "order_ties", combat, request_id, as_user, {"combatants": combatants}
        )

    async def reorder_group(
        self,
        combat: str,
        *,
        group: str,
        combatants: Sequence[str],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Sets the order a group's members act in (R4). Who: narrator."""
        return await self._command(
            "reorder_group", combat, request_id, as_user, {"group": group, "combatants": combatants}
        )

    async def start_combat(
        self,
        combat: str,
        *,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Rolls every unrolled check, fixes the order and begins the bonus round (marvel, if
        anyone qualifies) or round 1 (R1, R4, R7). Who: narrator."""
        return await self._command("start_combat", combat, request_id, as_user, {})

    async def end_turn(
        self,
        combat: str,
        *,
        turn: TurnRef | Mapping[str, Any],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Ends the current turn; the next one starts, held turns whose moment has come first
        (R5, R9). Who: narrator; a player for its own combatant (`turn.combatant`)."""
        return await self._command("end_turn", combat, request_id, as_user, {"turn": turn})

    async def declare_action(
        self,
        combat: str,
        *,
        turn: TurnRef | Mapping[str, Any],
        action: ActionSpec | Mapping[str, Any],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Takes an action in the current turn (R6). Who: narrator; a player for its own
        combatant (`turn.combatant`)."""
        return await self._command(
            "declare_action", combat, request_id, as_user, {"turn": turn, "action": action}
        )

    async def hold(
        self,
        combat: str,
        *,
        turn: TurnRef | Mapping[str, Any],
        number: int | None = None,
        when: Literal["before", "after"] | None = None,
        other: str | None = None,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Holds (marvel) or delays (dnd3e) the current turn before acting in it, optionally
        with its plan: a lower number, and/or just `when` (before or after) `other` (R9). Who:
        narrator; a player for its own combatant (`turn.combatant`)."""
        return await self._command(
            "hold",
            combat,
            request_id,
            as_user,
            {"turn": turn, "number": number, "when": when, "other": other},
        )

    async def take_held_turn(
        self,
        combat: str,
        *,
        combatant: str,
        when: Literal["before", "after"],
        other: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Says when a held turn is taken: just before or just after another combatant (R9). Who:
        narrator; a player for its own combatant."""
        return await self._command(
            "take_held_turn",
            combat,
            request_id,
            as_user,
            {"combatant": combatant, "when": when, "other": other},
        )

    async def reserve(
        self,
        combat: str,
        *,
        turn: TurnRef | Mapping[str, Any],
        reserved_type: str,
        action: ActionSpec | Mapping[str, Any],
        trigger: Trigger | Mapping[str, Any],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Reserves (marvel, R10) or readies (dnd3e, R11) an action with a trigger, spending
        `reserved_type` this turn. Who: narrator; a player for its own combatant
        (`turn.combatant`)."""
        return await self._command(
            "reserve",
            combat,
            request_id,
            as_user,
            {"turn": turn, "reserved_type": reserved_type, "action": action, "trigger": trigger},
        )

    async def refocus(
        self,
        combat: str,
        *,
        turn: TurnRef | Mapping[str, Any],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """dnd3e: spends the full round refocusing; when the turn ends the combatant's number
        becomes 20 + its initiative bonus (R14). Who: narrator; a player for its own combatant
        (`turn.combatant`)."""
        return await self._command("refocus", combat, request_id, as_user, {"turn": turn})

    async def announce_trigger(
        self,
        combat: str,
        *,
        facts: TriggerFacts | Mapping[str, Any],
        offer: Sequence[str] = (),
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Names a trigger-eligible moment and opens a reaction window for it: reservers whose
        predicate matches, and those in `offer`, are offered (R12). Who: narrator."""
        return await self._command(
            "announce_trigger", combat, request_id, as_user, {"facts": facts, "offer": offer}
        )

    async def claim_reaction(
        self,
        combat: str,
        *,
        window: str,
        combatant: str,
        reservation: str | None = None,
        action: ActionSpec | Mapping[str, Any] | None = None,
        faces: Sequence[int] | None = None,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Claims a reaction in the open window, with a reservation or (marvel) a stated
        action. Who: narrator; a player for its own combatant."""
        return await self._command(
            "claim_reaction",
            combat,
            request_id,
            as_user,
            {
                "window": window,
                "combatant": combatant,
                "reservation": reservation,
                "action": action,
                "faces": faces,
            },
        )

    async def pass_reaction(
        self,
        combat: str,
        *,
        window: str,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Declines the open window. Who: narrator; a player for its own combatant."""
        return await self._command(
            "pass_reaction", combat, request_id, as_user, {"window": window, "combatant": combatant}
        )

    async def close_window(
        self,
        combat: str,
        *,
        window: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Closes the open window now; its claims, if any, are ordered and start resolving (R12).
        Who: narrator."""
        return await self._command("close_window", combat, request_id, as_user, {"window": window})

    async def finish_reaction(
        self,
        combat: str,
        *,
        window: str,
        combatant: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """The combatant reacting now is done; the next entry starts, or the triggering action
        resolves and the turn resumes (R12). Who: narrator; a player for its own combatant."""
        return await self._command(
            "finish_reaction",
            combat,
            request_id,
            as_user,
            {"window": window, "combatant": combatant},
        )

    async def apply_condition(
        self,
        combat: str,
        *,
        target: str,
        type: str,
        rounds: int = 1,
        boundary: Boundary = "end",
        anchor: str | None = None,
        source: str | None = None,
        note: str = "",
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Applies a condition lasting `rounds` boundaries of `anchor`'s turns (R13). Who:
        narrator."""
        return await self._command(
            "apply_condition",
            combat,
            request_id,
            as_user,
            {
                "target": target,
                "type": type,
                "rounds": rounds,
                "boundary": boundary,
                "anchor": anchor,
                "source": source,
                "note": note,
            },
        )

    async def remove_condition(
        self,
        combat: str,
        *,
        condition: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Removes a condition before it expires. Who: narrator."""
        return await self._command(
            "remove_condition", combat, request_id, as_user, {"condition": condition}
        )

    async def surprise(
        self,
        combat: str,
        *,
        target: str,
        by: Sequence[str],
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """marvel, mid-combat: `target` is surprised by `by` until the start of each surpriser's
        next turn (R8). Who: narrator."""
        return await self._command(
            "surprise", combat, request_id, as_user, {"target": target, "by": by}
        )

    async def record_outcome(
        self,
        combat: str,
        *,
        kind: str,
        text: str,
        combatant: str | None = None,
        values: Mapping[str, OptionValue] | Sequence[tuple[str, OptionValue]] = (),
        template: str = "",
        args: Mapping[str, OptionValue] | Sequence[tuple[str, OptionValue]] = (),
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Records an outcome computed outside the engine, typically by a plugin: a DC, a check,
        a result (the `dnd3e-ready` plugin records Concentration and Spellcraft DCs this way).
        With `template` and `args` (which must fill it in to `text`), the daemon tells it in
        each session's language. Who: narrator (plugins act as narrator, recorded as
        `plugin:<name>`)."""
        return await self._command(
            "record_outcome",
            combat,
            request_id,
            as_user,
            {
                "kind": kind,
                "text": text,
                "combatant": combatant,
                "values": _pairs(values),
                "template": template,
                "args": _pairs(args),
            },
        )

    async def disable_plugin(
        self,
        combat: str,
        *,
        plugin: str,
        reason: str = "",
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Stops calling a plugin's hooks for this combat. Who: narrator."""
        return await self._command(
            "disable_plugin", combat, request_id, as_user, {"plugin": plugin, "reason": reason}
        )

    async def enable_plugin(
        self,
        combat: str,
        *,
        plugin: str,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Calls a disabled plugin's hooks for this combat again, with its failure count reset.
        Who: narrator."""
        return await self._command("enable_plugin", combat, request_id, as_user, {"plugin": plugin})

    async def tick(
        self,
        combat: str,
        *,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Lets time pass: an open window whose deadline has come closes, then the turn timer
        warns or expires (R13). Who: narrator."""
        return await self._command("tick", combat, request_id, as_user, {})

    async def undo(
        self,
        combat: str,
        *,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Undoes the last recorded command, restoring the state before it; repeatable up to 200
        commands back, never past `create_combat` (R15). Who: narrator."""
        return await self._command("undo", combat, request_id, as_user, {})

    async def end_combat(
        self,
        combat: str,
        *,
        request_id: str | None = None,
        as_user: str | None = None,
    ) -> CommandResult:
        """Ends the combat, cancelling whatever is pending (R1). Who: narrator."""
        return await self._command("end_combat", combat, request_id, as_user, {})
