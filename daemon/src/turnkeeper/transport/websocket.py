"""The protocol over WebSocket, for browsers and JavaScript programs, and the table view's files.

A browser has no raw sockets, so ``--ws`` (and ``--http``, which adds the table view) opens an
HTTP listener: ``/ws`` upgrades to a WebSocket carrying exactly the socket protocol, one message
per binary frame; ``/foundry/`` serves the Foundry VTT module (``foundry.py``); with the page
on, every other path is a static file of ``turnkeeper/web`` or a translation catalogue. HTTP is
parsed by h11 and the WebSocket by wsproto, both sans-I/O, over the same ``asyncio`` channel as
the other transports (``channel.py``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any
from urllib.parse import urlsplit

import anyio
import h11
import structlog
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    TextMessage,
)
from wsproto.events import Request as WsRequest
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from turnkeeper_sdk import wire

from .. import i18n
from . import foundry
from .channel import Channel, peer_address

log = structlog.get_logger("turnkeeper.websocket")

WS_PATH = "/ws"
MAX_HEAD_BYTES = 16 * 1024
"""Longest HTTP request head (request line and headers): a browser's is well under 8 KiB."""
HANDSHAKE_TIMEOUT = 5.0
"""Seconds to send a whole request head: a client that trickles one must not hold a handshake
slot for long. A browser sends its head in one packet."""
HEAD_IDLE_TIMEOUT = 2.0
"""Seconds between two reads of a request head that bring nothing: a peer sending a byte now
and then is dropped long before ``HANDSHAKE_TIMEOUT``."""
MAX_HANDSHAKES = 128
"""HTTP requests being read or answered at once; beyond, a newcomer is closed unanswered. The
connection limit counts sessions only, so this bounds what a flood of bare TCP opens costs."""
MAX_HANDSHAKES_PER_ADDRESS = 16
"""Of those, the most from one peer address, so that a few slow peers cannot hold them all: a
browser opens up to six connections to a host at once to load a page, and a household's or a
table's browsers may share one address."""
CLOSE_GOING_AWAY = 1001
"""The WebSocket close code sent when the daemon stops or drops a connection."""
CLOSE_POLICY = 1008
"""The WebSocket close code sent with a fatal protocol error (the error notification, sent just
before, says which)."""

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ts": "text/plain; charset=utf-8",
    "": "text/plain; charset=utf-8",
}
_CATALOGUE = re.compile(r"^/i18n/([A-Za-z_-]{1,35})\.json$")
_IMPORT_MAP = re.compile(rb'<script type="importmap">(.*?)</script>', re.DOTALL)


def _frame(data: bytes) -> bytes:
    """A binary frame of a whole message as a server sends it (unmasked, unfragmented)."""
    size = len(data)
    if size < 126:
        head = bytes((0x82, size))
    elif size < 1 << 16:
        head = b"\x82\x7e" + size.to_bytes(2, "big")
    else:
        head = b"\x82\x7f" + size.to_bytes(8, "big")
    return head + data


class WebSocketChannel(Channel):
    """An HTTP connection: a file or an error answered (``Gate``), or a WebSocket carrying one
    protocol message per binary message."""

    kind = "ws"

    def __init__(self, gate: Gate, accepted: Callable[[Channel], None]) -> None:
        super().__init__(accepted)
        self._gate = gate
        self._ws: WSConnection | None = None
        self._open = False
        # One buffer, not a list of parts: a message split into many empty continuation frames
        # must cost its bytes, not an entry per frame.
        self._message = bytearray()
        self._text = 0  # bytes of a text message so far (its text is not kept)
        self._pong: bytes | None = None
        """The answer to the latest ping, held while bytes wait for the peer."""
        self._decoder: wire.Decoder | None = None

    def identify(self, transport: asyncio.Transport) -> None:
        self.address = peer_address(transport)

    async def open(self) -> bool:
        try:
            self._ws = await self._gate.accept(self)
        except Exception:
            log.exception("http_failed")
            self.abort()
            return False
        self._open = self._ws is not None
        return self._open

    async def next(self, limits: wire.Limits) -> wire.Message | wire.WireError | None:
        try:
            data = await self._receive_message(limits.message_bytes)
        except wire.WireError as e:
            return e
        if data is None:
            return None
        if isinstance(data, str):
            return wire.WireError(wire.INVALID_MESSAGE, "text frames are not accepted: send binary")
        # One decoder for the connection's messages: a new one for each cost a message ~20 µs
        # more (msgpack's unpacker and the header scanner made again).
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = wire.Decoder(limits)
        else:
            decoder.limit(limits)
        items = decoder.feed(data)
        if len(items) == 1 and not decoder.pending:
            return items[0]
        # The frame's bytes were not one message: what the decoder holds of them is dropped
        # with it, and the next frame is read afresh.
        self._decoder = None
        fatal = [i for i in items if isinstance(i, wire.WireError) and i.fatal]
        if fatal:
            return fatal[0]
        return wire.WireError(wire.INVALID_MESSAGE, "a binary frame must hold exactly one message")

    async def _receive_message(self, max_bytes: int) -> bytes | str | None:
        """The next whole message: bytes for a binary one, the text of a text one (which the
        protocol refuses); None once the WebSocket is closed."""
        ws = self._ws
        assert ws is not None
        while True:
            for event in ws.events():
                if isinstance(event, BytesMessage):
                    if len(self._message) + len(event.data) > max_bytes:
                        # Checked as the parts arrive, so a huge message is never held whole.
                        raise wire.too_large(max_bytes)
                    self._message += event.data
                    if event.message_finished:
                        data = bytes(self._message)
                        self._message.clear()
                        return data
                elif isinstance(event, TextMessage):
                    # Refused once whole, but held to the same size meanwhile: a text message
                    # that never ends must not be read for ever.
                    self._text += len(event.data.encode())
                    if self._text > max_bytes:
                        raise wire.too_large(max_bytes)
                    if event.message_finished:
                        self._text = 0
                        return "text"
                elif isinstance(event, Ping):
                    # Pings are read as fast as they come, so their answers must not pile up
                    # behind a peer that does not read: while bytes wait for it, only the
                    # latest ping is answered, once they are out (RFC 6455 allows it).
                    pong = ws.send(event.response())
                    assert self.transport is not None
                    if self.transport.get_write_buffer_size():
                        self._pong = pong
                    else:
                        self.put(pong)
                elif isinstance(event, CloseConnection):
                    if ws.state is ConnectionState.OPEN:
                        # wsproto reports a broken frame as a close it wants to send, and
                        # stays open: the frame was the peer's fault, and fatal.
                        raise wire.WireError(
                            wire.INVALID_MESSAGE,
                            "not a valid WebSocket frame: {reason}",
                            fatal=True,
                            reason=event.reason or str(event.code),
                        )
                    self._open = False
                    if ws.state is ConnectionState.REMOTE_CLOSING:
                        self.put(ws.send(event.response()))
                    return None
            data = await self.receive()
            if not data:
                self._open = False
                ws.receive_data(None)
                return None
            ws.receive_data(data)

    def _drained(self) -> None:
        pong, self._pong = self._pong, None
        if pong is not None and self._open:
            self.put(pong)

    @property
    def _open(self) -> bool:
        """Whether messages may still be sent: not once a close frame went either way. Kept
        as the channel's ``framing``, which a fan-out reads for every subscriber: binary
        frames while open, None (nothing more to send) once closing."""
        return self.framing is not None

    @_open.setter
    def _open(self, value: bool) -> None:
        self.framing = _frame if value else None

    def frame(self, data: bytes) -> bytes:
        return b"" if self.framing is None else _frame(data)

    def _goodbye(self, *, refused: bool) -> None:
        """A close frame while the WebSocket is open: 1008 after a fatal error, else 1001."""
        if self._open and self._ws is not None:
            self._open = False
            code = CLOSE_POLICY if refused else CLOSE_GOING_AWAY
            self.put(self._ws.send(CloseConnection(code=code)))


class Site:
    """The table view's files, read once: there is nothing to look up on disk per request, and
    no request path can name a file outside them."""

    def __init__(self, root: Traversable | None = None) -> None:
        self.files: dict[str, tuple[bytes, str]] = {}
        self._walk(root or resources.files("turnkeeper") / "web", "")
        page = self.files.get("/index.html", (b"", ""))[0]
        found = _IMPORT_MAP.search(page)
        # The page's only inline script is its import map: it is allowed by its hash, so no
        # other inline script could run even if one got in.
        digest = base64.b64encode(hashlib.sha256(found.group(1)).digest()).decode() if found else ""
        scripts = f"'self' 'sha256-{digest}'" if digest else "'self'"
        self.policy = (
            f"default-src 'self'; script-src {scripts}; connect-src 'self'; "
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )

    def _walk(self, folder: Traversable, prefix: str) -> None:
        if not folder.is_dir():
            return
        for item in folder.iterdir():
            path = f"{prefix}/{item.name}"
            if item.is_dir():
                self._walk(item, path)
            elif not item.name.startswith("."):
                suffix = item.name[item.name.rfind(".") :] if "." in item.name else ""
                self.files[path] = (item.read_bytes(), _TYPES.get(suffix, _TYPES[""]))

    def get(self, path: str) -> tuple[bytes, str] | None:
        if path == "/":
            path = "/index.html"
        found = self.files.get(path)
        if found is not None:
            return found
        match = _CATALOGUE.match(path)
        if match is not None:
            return _catalogue(i18n.negotiate(match.group(1))), _TYPES[".json"]
        return None


@cache
def _catalogue(locale: str) -> bytes:
    """A supported locale's catalogue as the page loads it; one per locale, built once."""
    body = {"locale": locale, "messages": i18n.catalogue(locale)}
    return json.dumps(body, ensure_ascii=False).encode()


class Gate:
    """The HTTP side of a ``--ws`` or ``--http`` listener: answers plain requests, hands
    WebSocket upgrades on."""

    def __init__(self, site: Site | None) -> None:
        self.site = site
        self.handshakes = 0
        self.handshakes_from: Counter[str] = Counter()

    async def accept(self, channel: Channel) -> WSConnection | None:
        """Read one request. A WebSocket upgrade on ``/ws`` is accepted and its connection
        returned; anything else is answered (a file, or an HTTP error), the channel closed and
        None returned."""
        address = channel.address or ""
        if (
            self.handshakes >= MAX_HANDSHAKES
            or self.handshakes_from[address] >= MAX_HANDSHAKES_PER_ADDRESS
        ):
            channel.abort()
            return None
        self.handshakes += 1
        self.handshakes_from[address] += 1
        try:
            # The slot is held until the answer is written, so what a flood of requests costs
            # stays within MAX_HANDSHAKES answers.
            with anyio.move_on_after(HANDSHAKE_TIMEOUT):
                with contextlib.suppress(TimeoutError):
                    ws = await self._accept(channel)
                    if ws is None:
                        await channel.wait_closed()
                    return ws
            channel.abort()
            return None
        finally:
            self.handshakes -= 1
            self.handshakes_from[address] -= 1
            if not self.handshakes_from[address]:
                del self.handshakes_from[address]

    async def _accept(self, channel: Channel) -> WSConnection | None:
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            event = await _next_event(http, channel)
        except h11.RemoteProtocolError as e:
            _answer(channel, http, e.error_status_hint, b"bad request\n")
            return None
        if not isinstance(event, h11.Request):
            channel.close()
            return None
        path = urlsplit(event.target.decode("ascii", "replace")).path
        headers = {k.lower(): v for k, v in event.headers}
        upgrade = headers.get(b"upgrade", b"").lower() == b"websocket"
        if path == WS_PATH and event.method == b"GET":
            if upgrade:
                return _upgrade(channel, http, event)
            _answer(channel, http, 426, b"this path speaks WebSocket only\n")
            return None
        if event.method not in (b"GET", b"HEAD"):
            _answer(channel, http, 405, b"method not allowed\n", [(b"allow", b"GET, HEAD")])
            return None
        if path.startswith(foundry.PREFIX):
            found = foundry.answer(path, headers.get(b"host"), channel)
        else:
            found = self.site.get(path) if self.site is not None else None
        if found is None:
            _answer(channel, http, 404, b"not found\n")
            return None
        body, kind = found
        extra = [(b"content-security-policy", self.site.policy.encode())] if self.site else []
        _answer(
            channel,
            http,
            200,
            body,
            [(b"content-type", kind.encode()), *extra],
            head=event.method == b"HEAD",
        )
        return None


def _upgrade(channel: Channel, http: h11.Connection, request: h11.Request) -> WSConnection | None:
    ws = WSConnection(ConnectionType.SERVER)
    try:
        ws.initiate_upgrade_connection(list(request.headers), request.target)
        events = list(ws.events())
    except (RemoteProtocolError, LocalProtocolError):
        _answer(channel, http, 400, b"not a valid WebSocket handshake\n")
        return None
    if not any(isinstance(e, WsRequest) for e in events):
        _answer(channel, http, 400, b"not a valid WebSocket handshake\n")
        return None
    channel.put(ws.send(AcceptConnection()))
    # Bytes the client sent right behind its request head are the first frames.
    leftover, _closed = http.trailing_data
    if leftover:
        ws.receive_data(bytes(leftover))
    return ws


async def _next_event(http: h11.Connection, channel: Channel) -> Any:
    while True:
        event = http.next_event()
        if event is not h11.NEED_DATA:
            return event
        # A TimeoutError goes up: the peer is dropped unanswered, like one that ran out of
        # HANDSHAKE_TIMEOUT.
        with anyio.fail_after(HEAD_IDLE_TIMEOUT):
            data = await channel.receive()
        http.receive_data(data)


def _answer(
    channel: Channel,
    http: h11.Connection,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    head: bool = False,
) -> None:
    """One response, then the connection closes: browsers open more connections as needed,
    and a connection that ends with its answer needs no idle timeout."""
    fixed = [
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"cache-control", b"no-cache"),
        (b"x-content-type-options", b"nosniff"),
    ]
    if not any(k == b"content-type" for k, _ in headers or []):
        fixed.append((b"content-type", b"text/plain; charset=utf-8"))
    with contextlib.suppress(h11.LocalProtocolError):
        data = http.send(h11.Response(status_code=status, headers=[*fixed, *(headers or [])]))
        if not head:
            data = (data or b"") + (http.send(h11.Data(data=body)) or b"")
        data = (data or b"") + (http.send(h11.EndOfMessage()) or b"")
        channel.put(data)
    channel.close()
