"""The protocol over WebSocket, for browsers and JavaScript programs, and the table view's files.

A browser has no raw sockets, so ``--ws`` (and ``--http``, which adds the table view) opens an
HTTP listener: ``/ws`` upgrades to a WebSocket carrying exactly the socket protocol, one message
per binary frame; with the page on, every other path is a static file of ``turnkeeper/web`` or a
translation catalogue. HTTP is parsed by h11 and the WebSocket by wsproto, both sans-I/O, so the
bytes still move through anyio like every other connection.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import re
from collections import Counter
from collections.abc import Iterable
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any
from urllib.parse import urlsplit

import anyio
import h11
import structlog
from anyio.abc import ByteStream, SocketAttribute
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

from . import i18n

log = structlog.get_logger("turnkeeper.websocket")

WS_PATH = "/ws"
READ_CHUNK = 65536
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
CLOSE_POLICY = 1008
"""The WebSocket close code sent with a fatal protocol error (the error notification, sent just
before, says which)."""
CONTROL_TIMEOUT = 5.0
"""Seconds a pong or a close frame may take to be written: a peer that pings and never reads
must not hold its reader forever."""

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


class WebSocketStream:
    """One accepted WebSocket: whole binary messages in, frames out."""

    def __init__(self, stream: ByteStream, ws: WSConnection) -> None:
        self.stream = stream
        self.ws = ws
        # The reader answers pings and closes while the writer sends messages: one socket
        # write at a time.
        self._sending = anyio.Lock()
        # One buffer, not a list of parts: a message split into many empty continuation frames
        # must cost its bytes, not an entry per frame.
        self._message = bytearray()
        self._text = 0  # bytes of a text message so far (its text is not kept)
        self.max_message_bytes = wire.MAX_UNAUTHENTICATED_MESSAGE_BYTES
        """The longest message the peer may send now; the connection raises it after hello."""

    def extra(self, attribute: Any, default: Any = None) -> Any:
        return self.stream.extra(attribute, default)

    async def receive(self) -> bytes | str:
        """The next whole message: bytes for a binary one, the text of a text one (which the
        protocol refuses). Raises ``anyio.EndOfStream`` once the peer closed."""
        while True:
            for event in self.ws.events():
                if isinstance(event, BytesMessage):
                    if len(self._message) + len(event.data) > self.max_message_bytes:
                        # Checked as the parts arrive, so a huge message is never held whole.
                        raise wire.too_large(self.max_message_bytes)
                    self._message += event.data
                    if event.message_finished:
                        data = bytes(self._message)
                        self._message.clear()
                        return data
                elif isinstance(event, TextMessage):
                    # Refused once whole, but held to the same size meanwhile: a text message
                    # that never ends must not be read for ever.
                    self._text += len(event.data.encode())
                    if self._text > self.max_message_bytes:
                        raise wire.too_large(self.max_message_bytes)
                    if event.message_finished:
                        self._text = 0
                        return "text"
                elif isinstance(event, Ping):
                    await self._control(self.ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    if self.ws.state is ConnectionState.OPEN:
                        # wsproto reports a broken frame as a close it wants to send, and
                        # stays open: the frame was the peer's fault, and fatal.
                        raise wire.WireError(
                            wire.INVALID_MESSAGE,
                            "not a valid WebSocket frame: {reason}",
                            fatal=True,
                            reason=event.reason or str(event.code),
                        )
                    if self.ws.state is ConnectionState.REMOTE_CLOSING:
                        await self._control(self.ws.send(event.response()))
                    raise anyio.EndOfStream
            try:
                data = await self.stream.receive(READ_CHUNK)
            except anyio.EndOfStream:
                self.ws.receive_data(None)
                raise
            self.ws.receive_data(data)

    def frame(self, messages: Iterable[bytes]) -> bytes:
        """Each packed protocol message as its own binary frame, ready for one socket write;
        nothing once the WebSocket is closing, when no message may follow the close frame."""
        if self.ws.state is not ConnectionState.OPEN:
            return b""
        return b"".join(self.ws.send(BytesMessage(data=m)) for m in messages)

    async def send(self, data: bytes) -> None:
        if data:
            await self._send_raw(data)

    async def _send_raw(self, data: bytes) -> None:
        async with self._sending:
            await self.stream.send(data)

    async def _control(self, data: bytes) -> None:
        """A pong or a close reply, bounded in time: a peer that does not read is gone."""
        with anyio.move_on_after(CONTROL_TIMEOUT) as scope:
            await self._send_raw(data)
        if scope.cancelled_caught:
            raise anyio.BrokenResourceError

    async def aclose(self, code: int = CLOSE_GOING_AWAY) -> None:
        """Say goodbye with a close frame when the WebSocket is still open, then close. Shielded:
        this runs as the daemon stops too, when the connection's task is being cancelled."""
        with anyio.CancelScope(shield=True):
            try:
                if self.ws.state is ConnectionState.OPEN:
                    with anyio.move_on_after(CONTROL_TIMEOUT):
                        await self._send_raw(self.ws.send(CloseConnection(code=code)))
            except (
                LocalProtocolError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                OSError,
            ):
                pass  # the peer is gone already: nothing to say goodbye to
            finally:
                await self.stream.aclose()


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


def peer_key(address: str) -> str:
    """What the per-address bounds count a peer by: its IPv4 address, or the /64 network of an
    IPv6 one, since one host is routinely given a whole /64 and would otherwise count as
    billions of peers."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Gate:
    """The HTTP side of a ``--ws`` or ``--http`` listener: answers plain requests, hands
    WebSocket upgrades on."""

    def __init__(self, site: Site | None) -> None:
        self.site = site
        self.handshakes = 0
        self.handshakes_from: Counter[str] = Counter()

    async def accept(self, stream: ByteStream) -> WebSocketStream | None:
        """Read one request. A WebSocket upgrade on ``/ws`` is accepted and returned; anything
        else is answered (a file, or an HTTP error), the stream closed and None returned."""
        address = peer_key(str(stream.extra(SocketAttribute.remote_address, ("",))[0]))
        if (
            self.handshakes >= MAX_HANDSHAKES
            or self.handshakes_from[address] >= MAX_HANDSHAKES_PER_ADDRESS
        ):
            await stream.aclose()
            return None
        self.handshakes += 1
        self.handshakes_from[address] += 1
        try:
            with anyio.move_on_after(HANDSHAKE_TIMEOUT):
                with contextlib.suppress(TimeoutError):
                    return await self._accept(stream)
            await stream.aclose()
            return None
        finally:
            self.handshakes -= 1
            self.handshakes_from[address] -= 1
            if not self.handshakes_from[address]:
                del self.handshakes_from[address]

    async def _accept(self, stream: ByteStream) -> WebSocketStream | None:
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            event = await _next_event(http, stream)
        except h11.RemoteProtocolError as e:
            await _answer(stream, http, e.error_status_hint, b"bad request\n")
            return None
        if not isinstance(event, h11.Request):
            await stream.aclose()
            return None
        path = urlsplit(event.target.decode("ascii", "replace")).path
        headers = {k.lower(): v for k, v in event.headers}
        upgrade = headers.get(b"upgrade", b"").lower() == b"websocket"
        if path == WS_PATH and event.method == b"GET":
            if upgrade:
                return await self._upgrade(stream, http, event)
            await _answer(stream, http, 426, b"this path speaks WebSocket only\n")
            return None
        if event.method not in (b"GET", b"HEAD"):
            await _answer(stream, http, 405, b"method not allowed\n", [(b"allow", b"GET, HEAD")])
            return None
        found = self.site.get(path) if self.site is not None else None
        if found is None:
            await _answer(stream, http, 404, b"not found\n")
            return None
        body, kind = found
        extra = [(b"content-security-policy", self.site.policy.encode())] if self.site else []
        await _answer(
            stream,
            http,
            200,
            body,
            [(b"content-type", kind.encode()), *extra],
            head=event.method == b"HEAD",
        )
        return None

    async def _upgrade(
        self, stream: ByteStream, http: h11.Connection, request: h11.Request
    ) -> WebSocketStream | None:
        ws = WSConnection(ConnectionType.SERVER)
        try:
            ws.initiate_upgrade_connection(list(request.headers), request.target)
            events = list(ws.events())
        except (RemoteProtocolError, LocalProtocolError):
            await _answer(stream, http, 400, b"not a valid WebSocket handshake\n")
            return None
        if not any(isinstance(e, WsRequest) for e in events):
            await _answer(stream, http, 400, b"not a valid WebSocket handshake\n")
            return None
        await stream.send(ws.send(AcceptConnection()))
        # Bytes the client sent right behind its request head are the first frames.
        leftover, _closed = http.trailing_data
        if leftover:
            ws.receive_data(bytes(leftover))
        return WebSocketStream(stream, ws)


async def _next_event(http: h11.Connection, stream: ByteStream) -> Any:
    while True:
        event = http.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            # A TimeoutError goes up: the peer is dropped unanswered, like one that ran out of
            # HANDSHAKE_TIMEOUT.
            with anyio.fail_after(HEAD_IDLE_TIMEOUT):
                data = await stream.receive(READ_CHUNK)
        except TimeoutError:
            raise
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            data = b""
        http.receive_data(data)


async def _answer(
    stream: ByteStream,
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
    with contextlib.suppress(
        h11.LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError
    ):
        data = http.send(h11.Response(status_code=status, headers=[*fixed, *(headers or [])]))
        if not head:
            data = (data or b"") + (http.send(h11.Data(data=body)) or b"")
        data = (data or b"") + (http.send(h11.EndOfMessage()) or b"")
        await stream.send(data)
    await stream.aclose()
