"""The daemon's listeners and connections: MessagePack-RPC over a Unix socket, TCP and WebSocket.

Each connection has a reader (bytes → messages → one request at a time) and a writer fed by a
bounded outbox. A request is answered in the order it came; events reach subscribers through
the same outbox, and a subscriber that falls too far behind is disconnected. A WebSocket carries
the same messages, one per binary frame (``websocket.py``).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import signal
import socket
import stat
import struct
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskStatus
from anyio.streams.stapled import MultiListener

from turnkeeper_engine import Actor
from turnkeeper_engine.errors import Arg, TemplatedError
from turnkeeper_engine.plain import Plain
from turnkeeper_sdk import wire

from . import __version__, i18n
from .auth import AuthError, Principal, Tokens
from .host import MAX_COMBAT_PAGE, SNAPSHOT_EVERY, Hub, RequestError
from .loader import PluginChoice, announce, load
from .methods import MAX_HISTORY_PAGE, METHODS, command, number, text
from .private import PRIVATE_FILE, LockHeldError, exclusive_lock, private_directory
from .store import Store, StoreError
from .watchdog import Watchdog
from .websocket import CLOSE_POLICY, Gate, Site, WebSocketStream, peer_key

log = structlog.get_logger("turnkeeper.server")

OUTBOX_MESSAGES = 1024
"""Messages queued for one connection. A subscriber whose outbox is full is too slow: it is
disconnected (``slow_consumer``) rather than let the daemon's memory grow."""
MAX_CONNECTIONS = 512
"""Concurrent sessions (connections that have said hello); beyond, a newcomer is told
``server_busy`` and closed."""
MAX_WEB_CONNECTIONS = 256
"""Of those, the most that WebSocket may hold: a port open to browsers must not be able to
take every slot from the narrator's own tools on the Unix socket."""
UNIX_RESERVE = 32
"""Of those, the sessions only the Unix socket may take: however many token holders connect over
TCP and WebSocket, the narrator's own tools still get in."""
MAX_PENDING = 64
"""Connections that have not said hello yet, per TCP or WebSocket listener, counted apart from the
sessions: a flood of connections that never say hello fills this share of its own listener and no
more, and each one leaves after ``HELLO_TIMEOUT``. The Unix socket's peers are the daemon's own
user (the socket is 0600): they may have as many waiting as there are sessions."""
MAX_PENDING_PER_ADDRESS = 8
"""Of a TCP or WebSocket listener's pending share, the most one peer address may hold, so that
one host cannot take the whole share."""
HELLO_TIMEOUT = 10.0
"""Seconds a connection may stay without a successful ``hello``: idle sockets cost nothing to
open and must not pile up."""
TOKEN_CHECK_SECONDS = 0.25
"""How often the daemon looks for a changed token file: a revoked token's sessions end within
this, even ones that only listen and never send a request."""
READ_CHUNK = 65536
SEND_TIMEOUT = 30.0
"""A reply that cannot be queued for this long means the peer stopped reading."""
COALESCE_BYTES = 256 * 1024
"""Most bytes gathered into one socket write."""
WRITE_STALL = 5.0
"""A write to the socket that makes no progress for this long means the peer stopped reading:
the connection is dropped, so a stuck peer never holds a connection slot for long."""
DRAIN_TIMEOUT = 10.0
"""On SIGTERM, how long in-flight commands get to finish before the daemon exits."""


@dataclass
class Config:
    data_dir: Path
    socket_path: Path | None
    tcp_host: str | None = None
    tcp_port: int | None = None
    narrator_uid: int | None = field(default_factory=os.getuid)
    """Unix peers with this uid are narrators without a token; None turns that off."""
    snapshot_every: int = SNAPSHOT_EVERY
    max_db_pages: int | None = None
    """A quota on the database and its WAL together, in SQLite pages; past it commits fail with
    ``store_full``."""
    plugins: PluginChoice = field(default_factory=PluginChoice)
    """Which plugins to load: every installed one by default."""
    ws_host: str | None = None
    ws_port: int | None = None
    """Where the WebSocket endpoint listens (``/ws``); None leaves it off."""
    page: bool = False
    """Whether the WebSocket listener also serves the table view (``--http``)."""


def _peer_address(stream: ByteStream | WebSocketStream) -> str | None:
    """The peer's IP address on TCP and WebSocket; None on the Unix socket."""
    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is None or raw.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return peer_key(str(stream.extra(SocketAttribute.remote_address)[0]))


def _peer_uid(stream: ByteStream | WebSocketStream) -> int | None:
    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is None or raw.family != socket.AF_UNIX:
        return None
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


_ids = count(1)


class Connection:
    """One client: its identity, its outbox and its subscriptions."""

    def __init__(
        self, server: Server, stream: ByteStream | WebSocketStream, transport: str
    ) -> None:
        self.server = server
        self.stream = stream
        self.id = f"c{next(_ids)}"
        self.transport = transport
        self.peer_uid = _peer_uid(stream)
        self.address = _peer_address(stream)
        self.principal: Principal | None = None
        self.actor = Actor("observer")
        self.send, self.outbox = anyio.create_memory_object_stream[bytes](OUTBOX_MESSAGES)
        self.closing: str | None = None
        self.refused = False
        """Whether the connection ends with a fatal error notification (``close_with``)."""
        self.subscribed: set[str] = set()
        self.hello_scope: anyio.CancelScope | None = None
        self.everywhere = False
        self.locale = "en"
        self.narration: str | None = None
        """The locale events are told in for this session (hello's ``narrate``), or None."""

    # Subscriber protocol -------------------------------------------------------------------

    def deliver(self, data: bytes) -> bool:
        try:
            self.send.send_nowait(data)
        except anyio.WouldBlock:
            self.close_with(
                wire.WireError("slow_consumer", "the connection fell too far behind its events")
            )
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    def room(self) -> int:
        stats = self.send.statistics()
        return int(stats.max_buffer_size - stats.current_buffer_used)

    def close_with(self, error: wire.WireError) -> None:
        """End the connection after a final error notification. What is still queued for it is
        dropped: the final notification must not wait behind a backlog the peer won't read."""
        if self.closing is None:
            self.closing = error.code
            self.refused = True
            with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                while True:
                    self.outbox.receive_nowait()
            error.fatal = True
            final = wire.error_message(error, self._text(error))
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
                self.send.send_nowait(wire.pack(final))
            self.send.close()

    async def reply(self, message: wire.Message) -> None:
        """Queue a reply. One too large for the wire becomes an error reply; a peer that stops
        reading for SEND_TIMEOUT is disconnected."""
        try:
            data = wire.pack(message)
        except wire.WireError as e:
            assert isinstance(message, wire.Response)
            error = wire.ErrorBody("result_too_large", self._text(e))
            data = wire.pack(wire.Response(message.msgid, error, None))
        try:
            with anyio.fail_after(SEND_TIMEOUT):
                await self.send.send(data)
        except TimeoutError:
            self.close_with(
                wire.WireError(
                    "slow_consumer",
                    "a reply waited over {seconds:g} s to be read",
                    seconds=SEND_TIMEOUT,
                )
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the connection is closing; its final notification is already queued

    def _text(self, error: wire.WireError | RequestError | AuthError | StoreError) -> str:
        """An error's message in this session's language."""
        return i18n.localize(error, self.locale)

    def _refusal(self, error: wire.WireError) -> wire.Message:
        """What to send for a refused message, in this session's language."""
        return wire.error_message(error, self._text(error))

    # Loops ---------------------------------------------------------------------------------

    async def writer(self) -> None:
        try:
            async with self.outbox:
                async for data in self.outbox:
                    # Everything already queued goes out in one write: under fan-out a writer
                    # wakes once per burst, not once per event.
                    chunks = [data]
                    size = len(data)
                    while size < COALESCE_BYTES:
                        try:
                            more = self.outbox.receive_nowait()
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                        chunks.append(more)
                        size += len(more)
                    if isinstance(self.stream, WebSocketStream):
                        data = self.stream.frame(chunks)
                    else:
                        data = b"".join(chunks)
                    with anyio.fail_after(WRITE_STALL):
                        await self.stream.send(data)
        except TimeoutError:
            self.closing = self.closing or "write_stalled"
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self.closing = self.closing or "peer_gone"  # the reader stops at its next receive
        finally:
            if isinstance(self.stream, WebSocketStream) and self.refused:
                await self.stream.aclose(CLOSE_POLICY)
            else:
                await self.stream.aclose()

    @property
    def limits(self) -> wire.Limits:
        """What one message from this peer may cost: far less before hello, when anyone who can
        reach the port may be sending."""
        return wire.REQUESTS if self.principal is not None else wire.BEFORE_HELLO

    async def reader(self) -> None:
        decoder = wire.Decoder(self.limits)
        with anyio.move_on_after(HELLO_TIMEOUT) as hello_scope:
            self.hello_scope = hello_scope
            while self.principal is None and self.closing is None:
                if not await self._read_some(decoder):
                    return
        if hello_scope.cancelled_caught and self.principal is None:
            self.close_with(
                wire.WireError(
                    "hello_timeout", "no hello within {seconds:g} s", seconds=HELLO_TIMEOUT
                )
            )
            return
        while self.closing is None:
            if not await self._read_some(decoder):
                return

    async def _read_some(self, decoder: wire.Decoder) -> bool:
        """Read once and handle every message that completes, one at a time: a hello's success
        raises the limits for the very next message."""
        items: Iterator[wire.Message | wire.WireError]
        try:
            if isinstance(self.stream, WebSocketStream):
                self.stream.max_message_bytes = self.limits.message_bytes
                items = iter(_one_message(await self.stream.receive(), self.limits))
            else:
                decoder.push(await self.stream.receive(min(READ_CHUNK, self.limits.message_bytes)))
                items = iter(decoder.next, None)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        except wire.WireError as e:
            items = iter([e])
        for item in items:
            if isinstance(item, wire.WireError):
                if item.fatal:
                    self.close_with(item)
                    return False
                # Notifications from clients carry nothing in this version and are ignored,
                # malformed ones too (some MessagePack-RPC clients send one on connect).
                if not item.notification:
                    await self.reply(self._refusal(item))
            elif isinstance(item, wire.Request):
                await self.handle(item)
                decoder.limit(self.limits)
            elif isinstance(item, wire.Response):
                # Clients answer nothing in this protocol: a response is a confused peer.
                note = wire.WireError(wire.INVALID_MESSAGE, "clients send no responses")
                await self.reply(self._refusal(note))
            if self.closing is not None:
                return False
        return True

    async def handle(self, request: wire.Request) -> None:
        started = time.perf_counter()
        outcome = "ok"
        combat = request.params.get("combat") or request.params.get("combat_id")
        try:
            try:
                result = await self.dispatch(request.method, request.params)
                answer = wire.Response(request.msgid, None, result)
            except (RequestError, AuthError, StoreError) as e:
                outcome = e.code
                error = wire.ErrorBody(e.code, self._text(e), getattr(e, "field", ""))
                answer = wire.Response(request.msgid, error, None)
            except Exception:
                # One request's failure is that request's error, never the daemon's end.
                outcome = "internal_error"
                log.exception("request_failed", method=request.method)
                failed = i18n.gettext(self.locale, "the daemon failed on this request")
                error = wire.ErrorBody("internal_error", failed)
                answer = wire.Response(request.msgid, error, None)
            await self.reply(answer)
        finally:
            # One line per request is for debugging (``--debug``): at INFO it would be most of
            # a busy daemon's log.
            log.debug(
                "request",
                user=self.principal.key if self.principal else None,
                method=request.method,
                combat=combat if isinstance(combat, str) else None,
                outcome=outcome,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
            )

    async def dispatch(self, method: str, params: Mapping[str, Any]) -> Plain:
        found = METHODS.get(method)
        if found is None:
            raise RequestError("unknown_method", "no method {method!r}", "method", method=method)
        if method == "hello":
            return self.hello(params)
        if self.principal is None:
            raise RequestError("hello_required", "say hello first", "method")
        if not self.server.tokens.still_valid(self.principal):
            self.close_with(
                wire.WireError("token_revoked", "the token of this session has been revoked")
            )
            raise RequestError("token_revoked", "the token of this session has been revoked")
        hub = self.server.hub
        if found.kind == "command":
            request_id = text(params, "request_id")
            assert request_id is not None
            as_user = text(params, "as", required=False)
            actor = self.principal.actor(as_user)
            combat_id, value = command(method, params)
            result = await self.server.run_command(
                self.principal.key, actor, combat_id, value, request_id
            )
            return self._told(result, actor)
        if method == "list_combats":
            return hub.summaries(text(params, "after", required=False), _page_limit(params))
        if method == "list_plugins":
            return hub.plugin_listing()
        if method == "subscribe_all":
            if self.everywhere:
                raise RequestError("already_subscribed", "subscribed to all already", "method")
            answer = hub.subscribe_all(self, _page_limit(params))
            self.everywhere = True
            return answer
        if method == "unsubscribe_all":
            hub.everywhere.discard(self)
            self.everywhere = False
            return {}
        target = text(params, "combat")
        assert target is not None
        combat_id = target
        if method == "get_combat":
            return await hub.view(combat_id, self.actor)
        if method == "history":
            after = number(params, "after", 0, 0, 2**53)
            limit = number(params, "limit", 100, 1, MAX_HISTORY_PAGE)
            return await hub.history(combat_id, self.actor, after, limit, self.narration)
        if method == "subscribe":
            if combat_id in self.subscribed:
                raise RequestError("already_subscribed", "subscribed to it already", "combat")
            after = number(params, "after", 0, 0, 2**53)
            seq = await hub.subscribe(combat_id, self, after)
            self.subscribed.add(combat_id)
            return {"combat": combat_id, "seq": seq}
        assert method == "unsubscribe"
        hub.unsubscribe(self, combat_id)
        self.subscribed.discard(combat_id)
        return {"combat": combat_id}

    def _told(self, result: Plain, actor: Actor) -> Plain:
        """A command result's events, as shown to ``actor``, with their narrated lines if this
        session asked for them."""
        if self.narration is None:
            return result
        assert isinstance(result, dict)
        combat = result["combat"]
        assert isinstance(combat, str)
        events = self.server.hub.told(combat, result["events"], actor, self.narration)
        return {**result, "events": events}

    def hello(self, params: Mapping[str, Any]) -> Plain:
        if self.principal is not None:
            raise RequestError("hello_repeated", "this connection has said hello already", "method")
        locale = params.get("locale")
        if locale is not None and not isinstance(locale, str):
            raise RequestError("invalid_params", "a string", "locale")
        narrate = params.get("narrate", False)
        if not isinstance(narrate, bool):
            raise RequestError("invalid_params", "a boolean", "narrate")
        # Chosen before anything can fail, so even a refused hello answers in the language asked.
        self.locale = i18n.negotiate(locale)
        level = params.get("protocol")
        if not isinstance(level, int) or level < wire.COMPATIBLE_VERSION:
            raise RequestError(
                "unsupported_protocol",
                "this server speaks protocol {level} (compatible down to {compatible})",
                "protocol",
                level=wire.PROTOCOL_VERSION,
                compatible=wire.COMPATIBLE_VERSION,
            )
        token = params.get("token")
        principal: Principal | None = None
        if token is not None:
            if not isinstance(token, str):
                raise RequestError("invalid_params", "a string", "token")
            principal = self.server.tokens.authenticate(token)
            if principal is None:
                raise RequestError("unauthenticated", "unknown or revoked token", "token")
        elif self.peer_uid is not None and self.peer_uid == self.server.config.narrator_uid:
            principal = Principal(f"uid:{self.peer_uid}", "narrator")
        else:
            raise RequestError("unauthenticated", "a token is required on this connection", "token")
        busy = self.server.session_refusal(self.transport)
        if busy is not None:
            self.close_with(busy)
            raise RequestError.relay(busy, busy.code)
        self.server.promote(self)
        self.principal = principal
        self.narration = self.locale if narrate else None
        # The hello deadline is met: requests that came with the hello must not be cut by it.
        if self.hello_scope is not None:
            self.hello_scope.deadline = math.inf
        self.actor = principal.reader()
        return {
            "protocol": wire.PROTOCOL_VERSION,
            "compatible": wire.COMPATIBLE_VERSION,
            "server": {"name": "turnkeeper", "version": __version__},
            "session": {
                "role": principal.role,
                "user": principal.user,
                "connection": self.id,
                "locale": self.locale,
            },
            "methods": [
                {"name": m.name, "kind": m.kind, "since": m.since, "summary": m.summary}
                for m in METHODS.values()
            ],
            "events": [{"name": name, "since": 1} for name in _event_names()],
            "limits": {
                "max_message_bytes": wire.MAX_MESSAGE_BYTES,
                "max_request_values": wire.MAX_REQUEST_VALUES,
                "outbox_messages": OUTBOX_MESSAGES,
                "max_history_page": MAX_HISTORY_PAGE,
                "max_combat_page": MAX_COMBAT_PAGE,
            },
        }


def _page_limit(params: Mapping[str, Any]) -> int | None:
    """A page's ``limit``: None (every combat, if they fit one page) when not given."""
    if params.get("limit") is None:
        return None
    return number(params, "limit", MAX_COMBAT_PAGE, 1, MAX_COMBAT_PAGE)


def _one_message(data: bytes | str, limits: wire.Limits) -> list[wire.Message | wire.WireError]:
    """What one WebSocket message holds: exactly one protocol message, or the error saying why
    not. The frame boundary keeps the stream in step, so only errors msgpack itself calls fatal
    (bad bytes, too deep, too long) end the connection, as on a socket."""
    if isinstance(data, str):
        return [wire.WireError(wire.INVALID_MESSAGE, "text frames are not accepted: send binary")]
    decoder = wire.Decoder(limits)
    items = decoder.feed(data)
    if len(items) == 1 and not decoder.pending:
        return items
    if any(isinstance(i, wire.WireError) and i.fatal for i in items):
        return [next(i for i in items if isinstance(i, wire.WireError) and i.fatal)]
    return [wire.WireError(wire.INVALID_MESSAGE, "a binary frame must hold exactly one message")]


def _event_names() -> list[str]:
    from turnkeeper_engine.events import EVENTS

    return sorted(EVENTS)


class Server:
    """Listeners, connections and the hub, for one data directory."""

    def __init__(self, config: Config, store: Store, hub: Hub) -> None:
        self.config = config
        self.store = store
        self.hub = hub
        self.tokens = Tokens(config.data_dir)
        self.connections: set[Connection] = set()
        self.sessions: Counter[str] = Counter()
        """Connections that have said hello, by transport."""
        self.pending: Counter[str] = Counter()
        """Connections that have not said hello yet, by listener (transport)."""
        self.pending_from: Counter[str] = Counter()
        """The same, on TCP and WebSocket, by peer address."""
        self.in_flight = 0
        self.draining = False

    async def run_command(
        self, principal: str, actor: Actor, combat_id: str, value: Any, request_id: str
    ) -> Plain:
        if self.draining:
            raise RequestError(
                "shutting_down", "the daemon is stopping; retry with the same request_id"
            )
        self.in_flight += 1
        try:
            # Once accepted, a command runs to its commit even if the daemon is asked to stop.
            with anyio.CancelScope(shield=True):
                result = await self.hub.execute(principal, actor, combat_id, value, request_id)
            return result
        finally:
            self.in_flight -= 1

    async def watch_tokens(self) -> None:
        """End the sessions of revoked tokens as soon as the token file changes, including those
        that only listen: checking at each request alone would leave a subscriber reading on."""
        seen: object = None
        while True:
            await anyio.sleep(TOKEN_CHECK_SECONDS)
            try:
                records = self.tokens.load()
            except (AuthError, OSError, ValueError, TypeError):
                continue  # what is wrong with the file is said where it is read for a request
            if records is seen:
                continue
            seen = records
            for conn in list(self.connections):
                if conn.principal is not None and not self.tokens.still_valid(conn.principal):
                    conn.close_with(
                        wire.WireError(
                            "token_revoked", "the token of this session has been revoked"
                        )
                    )

    async def handle_web(self, gate: Gate, stream: ByteStream) -> None:
        """An HTTP connection: a file or an error answered, or a WebSocket session."""
        try:
            ws = await gate.accept(stream)
        except Exception:
            log.exception("http_failed")
            await stream.aclose()
            return
        if ws is not None:
            await self.handle(ws, "ws")

    def session_refusal(self, transport: str) -> wire.WireError | None:
        """``server_busy`` if a connection over ``transport`` cannot become a session now."""
        limit = MAX_CONNECTIONS
        taken = sum(self.sessions.values())
        if transport != "unix" and taken < MAX_CONNECTIONS:
            limit = MAX_CONNECTIONS - UNIX_RESERVE
            taken = taken - self.sessions["unix"]
        if transport == "ws" and taken < limit:
            limit, taken = MAX_WEB_CONNECTIONS, self.sessions["ws"]
        if taken < limit:
            return None
        return wire.WireError("server_busy", "more than {count} connections", count=limit)

    def _admission(self, conn: Connection) -> wire.WireError | None:
        """``server_busy`` if ``conn``, which has not said hello, may not even wait for it."""
        busy = self.session_refusal(conn.transport)
        if busy is not None:
            return busy
        limit = MAX_CONNECTIONS if conn.transport == "unix" else MAX_PENDING
        if self.pending[conn.transport] >= limit:
            return wire.WireError(
                "server_busy",
                "{count} connections are waiting for their hello here already",
                count=limit,
            )
        if conn.address is not None and self.pending_from[conn.address] >= MAX_PENDING_PER_ADDRESS:
            return wire.WireError(
                "server_busy",
                "{count} connections from this address are waiting for their hello already",
                count=MAX_PENDING_PER_ADDRESS,
            )
        return None

    def promote(self, conn: Connection) -> None:
        """Count ``conn``, which has just said hello, as a session rather than pending."""
        self._forget_pending(conn)
        self.sessions[conn.transport] += 1

    def _forget_pending(self, conn: Connection) -> None:
        self.pending[conn.transport] -= 1
        if conn.address is not None:
            self.pending_from[conn.address] -= 1
            if not self.pending_from[conn.address]:
                del self.pending_from[conn.address]

    async def handle(self, stream: ByteStream | WebSocketStream, transport: str) -> None:
        conn = Connection(self, stream, transport)
        busy = self._admission(conn)
        if busy is not None:
            conn.close_with(busy)
            await conn.writer()
            return
        self.pending[transport] += 1
        if conn.address is not None:
            self.pending_from[conn.address] += 1
        self.connections.add(conn)
        # Every log line of this connection's task carries its id.
        structlog.contextvars.bind_contextvars(connection=conn.id)
        log.info("connected", transport=transport, uid=conn.peer_uid)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn.writer)
                try:
                    await conn.reader()
                finally:
                    conn.send.close()
        except Exception:
            # A broken connection ends alone: the listener, the other clients and the daemon go on.
            log.exception("connection_failed")
        finally:
            self.hub.unsubscribe(conn)
            self.connections.discard(conn)
            if conn.principal is None:
                self._forget_pending(conn)
            else:
                self.sessions[conn.transport] -= 1
            log.info("disconnected", reason=conn.closing or "closed")


class SocketPathError(TemplatedError):
    """The Unix socket's path is another's (a live daemon's socket, or a file that is not a
    socket of this user): refused, and never replaced."""

    def __init__(self, template: str, **args: Arg) -> None:
        super().__init__(template, args)


def prepare_socket_path(path: Path) -> int:
    """Make ready to bind ``path``; return its lock, to close once the socket is removed.

    The socket's directory is made private (see ``turnkeeper.private``: in a shared place like
    /tmp another user could have made it first, to catch the socket). ``<path>.lock`` is held by
    the daemon serving on the path, so a second one is refused (``SocketPathError``, naming the
    first one's pid) before it looks at the socket, even while the first is still binding. A
    socket of this user that no daemon answers on is then a dead daemon's, and is removed;
    anything else on the path is left alone and refused.
    """
    private_directory(
        path.parent, "socket directory", lambda name: name in (path.name, path.name + ".lock")
    )
    try:
        lock = exclusive_lock(path.with_name(path.name + ".lock"))
    except LockHeldError as e:
        raise SocketPathError(
            "a daemon (pid {pid}) is already listening on {path}", pid=e.holder, path=str(path)
        ) from None
    try:
        _remove_stale_socket(path)
    except BaseException:
        os.close(lock)
        raise
    return lock


def _remove_stale_socket(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise SocketPathError(
            "{path} exists and is not a socket of this user: not replaced", path=str(path)
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # A daemon of a version without the lock may still answer on it.
        probe.connect(str(path))
    except OSError as e:
        if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            log.warning("stale_socket_removed", path=str(path))
            return
        raise
    finally:
        probe.close()
    raise SocketPathError("a daemon is already listening on {path}", path=str(path))


def _remove_own_socket(path: Path, made: os.stat_result) -> None:
    """Unlink the socket this daemon bound, unless the path has since become another file (a
    later daemon's socket, after this one's was removed by hand)."""
    with contextlib.suppress(FileNotFoundError):
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):
            path.unlink()


def _address(host: str | None, port: int) -> str:
    """``HOST:PORT`` as a URL writes it (an IPv6 host in brackets)."""
    host = host or "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _listen(host: str | None, port: int, what: str) -> MultiListener[SocketStream]:
    """A TCP listener; failing, an error that names the address (the port is in use, or
    needs privileges)."""
    try:
        return await anyio.create_tcp_listener(local_host=host or "127.0.0.1", local_port=port)
    except OSError as e:
        raise OSError(
            e.errno, f"cannot listen for {what} on {_address(host, port)}: {e.strerror or e}"
        ) from e


async def serve(
    config: Config, *, task_status: TaskStatus[Server] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Run the daemon until SIGTERM or SIGINT, then drain in-flight commands and return."""
    plugins = load(config.plugins)
    announce(plugins)
    store = Store.open(config.data_dir, max_pages=config.max_db_pages)
    hub = Hub(store, snapshot_every=config.snapshot_every, plugins=plugins)
    server = Server(config, store, hub)
    bound: os.stat_result | None = None  # the socket this daemon made, the only one it removes
    socket_lock: int | None = None
    try:
        # A malformed token file stops the start, saying what is wrong with it; once running,
        # the daemon keeps its last good tokens through a bad edit (``Tokens.load``).
        server.tokens.read()
        async with anyio.create_task_group() as outer:
            await outer.start(store.run)
            await hub.recover()  # before any listener: every combat is known when serving
            async with anyio.create_task_group() as tg:
                tg.start_soon(hub.run_clock)
                tg.start_soon(hub.run_hooks)
                tg.start_soon(Watchdog(plugins).run)
                tg.start_soon(hub.warm)
                tg.start_soon(server.watch_tokens)
                if config.socket_path is not None:
                    socket_lock = prepare_socket_path(config.socket_path)
                    unix = await anyio.create_unix_listener(config.socket_path)
                    bound = os.lstat(config.socket_path)
                    os.chmod(config.socket_path, PRIVATE_FILE)
                    tg.start_soon(unix.serve, lambda s: server.handle(s, "unix"))
                if config.tcp_port is not None:
                    tcp = await _listen(config.tcp_host, config.tcp_port, "TCP")
                    tg.start_soon(tcp.serve, lambda s: server.handle(s, "tcp"))
                web_address = None
                if config.ws_port is not None:
                    gate = Gate(Site() if config.page else None)
                    web = await _listen(config.ws_host, config.ws_port, "WebSocket")
                    web_address = _address(config.ws_host, config.ws_port)
                    tg.start_soon(web.serve, lambda s: server.handle_web(gate, s))
                log.info(
                    "serving",
                    socket=str(config.socket_path),
                    tcp_port=config.tcp_port,
                    ws_port=config.ws_port,
                    page=config.page,
                    websocket=f"ws://{web_address}/ws" if web_address else None,
                    table_view=f"http://{web_address}/" if web_address and config.page else None,
                )
                task_status.started(server)
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        log.info("stopping", signal=signal.Signals(signum).name)
                        break
                server.draining = True
                with anyio.move_on_after(DRAIN_TIMEOUT):
                    while server.in_flight:
                        await anyio.sleep(0.01)
                # Commands still in flight (in a before hook, say) go on without plugins.
                plugins.stop()
                tg.cancel_scope.cancel()
            await store.stop()
    finally:
        store.close()
        if bound is not None and config.socket_path is not None:
            _remove_own_socket(config.socket_path, bound)
        if socket_lock is not None:
            os.close(socket_lock)
    log.info("stopped")
