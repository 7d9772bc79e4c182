"""The protocol over WebSocket, for browsers and JavaScript programs, and the table view's files.

A browser has no raw sockets, so ``--ws`` (and ``--http``, which adds the table view) opens an
HTTP listener: ``/ws`` upgrades to a WebSocket carrying exactly the socket protocol, one message
per binary frame; ``/foundry/`` serves the Foundry VTT module (``foundry.py``); with the page
on, every other path is a static file of ``turnkeeper/web`` or a translation catalogue. HTTP is
parsed by h11 and the WebSocket by wsproto, both sans-I/O, over the same ``asyncio`` channel as
the other transports (``channel.py``). The frame nearly every message comes in, a whole binary
message in one masked frame, is read by the channel itself (``_plain_frame``), and a read in it
answered as it arrives, as on the Unix socket; wsproto reads every other frame.
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


_BYTES = int.from_bytes(bytes(range(256)), "big")
_XOR = [
    (_BYTES ^ int.from_bytes(bytes((key,)) * 256, "big")).to_bytes(256, "big") for key in range(256)
]
"""For each byte of a masking key, what each byte becomes once unmasked (one XOR of 256-byte
integers per key: byte by byte, the table took ~6 ms to build)."""


def _frame_head(data: bytes, at: int) -> tuple[int, int] | None:
    """Where the payload of the frame at ``at`` starts and how long it is, or None while its
    head is not all here."""
    if len(data) - at < 2:
        return None
    second = data[at + 1]
    size = second & 0x7F
    start = at + 2
    if size == 126:
        start += 2
        size = int.from_bytes(data[at + 2 : start], "big")
    elif size == 127:
        start += 8
        size = int.from_bytes(data[at + 2 : start], "big")
    if second & 0x80:
        start += 4  # the masking key
    if start > len(data):
        return None
    return start, size


def _plain_frame(data: bytes, at: int) -> tuple[int, int] | None:
    """Where the payload of the frame at ``at`` starts and ends (perhaps past the bytes here)
    if it is a whole message that any valid WebSocket could send: a final, binary frame,
    masked as a client's must be, with no reserved bit and its size in the fewest bytes (under
    64 KiB). None for any other frame, or while its head is not all here. wsproto reads every
    other frame: parsing a message cost it ~25 µs, more than the command it carries."""
    # FIN, no reserved bit, binary; then masked
    if len(data) - at < 2 or data[at] != 0x82 or not data[at + 1] & 0x80:
        return None
    head = _frame_head(data, at)
    if head is None:
        return None
    start, size = head
    code = data[at + 1] & 0x7F
    if code == 127 or (code == 126 and size < 126):
        return None  # 64 KiB or more, or not in the fewest bytes (wsproto refuses that)
    return start, start + size


def _unmask(data: bytes, start: int, end: int) -> bytes:
    """The payload at ``data[start:end]``, unmasked by the key in the four bytes before it."""
    key = data[start - 4 : start]
    payload = bytearray(data[start:end])
    for i in range(4):
        payload[i::4] = payload[i::4].translate(_XOR[key[i]])
    return bytes(payload)


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
        self._limits = wire.BEFORE_HELLO
        """The limits in force, as the session's task last gave them (``next``)."""
        self._raw = b""
        """Bytes received and not read yet, from ``_at`` on: the start of a frame not all
        here, or frames behind the message just read."""
        self._at = 0
        self._through = 0
        """Bytes of a frame wsproto reads as they come that have not arrived yet."""
        self._in_message = False
        """Whether wsproto holds part of a message: its next frames are all wsproto's."""
        self._told = False
        """Whether wsproto may have events not yet taken (it was given bytes since)."""

    def identify(self, transport: asyncio.Transport) -> None:
        self.address = peer_address(transport)

    async def open(self) -> bool:
        try:
            accepted = await self._gate.accept(self)
        except Exception:
            log.exception("http_failed")
            self.abort()
            return False
        if accepted is None:
            self._open = False
            return False
        # Bytes the client sent right behind its request head are its first frames.
        self._ws, self._raw = accepted
        self._open = True
        return True

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if (
            self.at_once is None
            or waiter is None
            or waiter.done()
            or self._chunks
            or self._closing
            or self._raw
            or self._through
            or self._in_message
            or self.framing is None
        ):
            super().data_received(data)
            return
        # The session's task waits for these very bytes with nothing held anywhere (no frame
        # begun; wsproto idle, its events all taken before the task waits), as on the Unix
        # socket (``UnixChannel.data_received``): each whole binary frame is decoded here and,
        # if the session can answer it at once, costs no wake-up of its task. The first it
        # cannot is handed over, the bytes behind it queued as received.
        limit = self._limits.message_bytes
        at = 0
        while (frame := _plain_frame(data, at)) is not None:
            start, end = frame
            if end > len(data) or end - start > limit:
                break  # the rest is the task's: a frame not all here, a message too long
            at = end
            item = self._decode(_unmask(data, start, end))
            if not self.at_once(item):
                self._hand(item)
                break
            if self._closing or at == len(data):
                return
        if at < len(data):
            super().data_received(data[at:] if at else data)

    async def next(self, limits: wire.Limits) -> wire.Message | wire.WireError | None:
        self._limits = limits
        while True:
            handed = self._handed
            if handed is not None:
                self._handed = None
                return handed
            try:
                data = await self._receive_message(limits.message_bytes)
            except wire.WireError as e:
                return e
            if data is None:
                if self._handed is not None:
                    continue
                return None
            if isinstance(data, str):
                return wire.WireError(
                    wire.INVALID_MESSAGE, "text frames are not accepted: send binary"
                )
            return self._decode(data)

    def _decode(self, data: bytes) -> wire.Message | wire.WireError:
        """A binary message's one protocol message, or the error saying why it is not one."""
        # One decoder for the connection's messages: a new one for each cost a message ~20 µs
        # more (msgpack's unpacker and the header scanner made again).
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = wire.Decoder(self._limits)
        else:
            decoder.limit(self._limits)
        decoder.push(data)
        first = decoder.next()
        # Once its bytes are used up, asking the decoder for another message would cost a
        # failed read of msgpack's for each message.
        if first is not None and not decoder.pending:
            return first
        items = [first, *iter(decoder.next, None)] if first is not None else []
        # The frame's bytes were not one message: what the decoder holds of them is dropped
        # with it, and the next frame is read afresh.
        self._decoder = None
        fatal = [i for i in items if isinstance(i, wire.WireError) and i.fatal]
        if fatal:
            return fatal[0]
        return wire.WireError(wire.INVALID_MESSAGE, "a binary frame must hold exactly one message")

    async def _receive_message(self, max_bytes: int) -> bytes | str | None:
        """The next whole message: bytes for a binary one, the text of a text one (which the
        protocol refuses); None once the WebSocket is closed, or when a message decoded on
        arrival was handed over meanwhile."""
        ws = self._ws
        assert ws is not None
        while True:
            # wsproto has events only from bytes it was given: asked for them after each
            # message read here, it would parse its empty buffer for nothing.
            for event in ws.events() if self._told else ():
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
            self._told = False
            if self._raw:
                message = self._frames(max_bytes)
                if message is not None:
                    return message
                if self._told:
                    continue  # wsproto has frames to tell first
            if self._at:
                # The start of a frame is all that is kept of the bytes read before, not the
                # whole read: a peer that goes quiet there holds a few bytes, not 256 KiB.
                self._raw, self._at = self._raw[self._at :], 0
            data = await self.receive()
            if not data:
                if self._handed is not None:
                    return None
                self._open = False
                ws.receive_data(None)
                return None
            self._raw = self._raw + data if self._raw else data

    def _frames(self, max_bytes: int) -> bytes | None:
        """Read the frames received: the payload of a whole binary message in one frame, read
        here (``_plain_frame``); any other frame goes to wsproto, which checks every rule of
        RFC 6455 (``_told`` says it was given some), with the frames behind it up to the next
        plain one. None when neither: the next frame is not all here yet."""
        raw, at = self._raw, self._at
        if self._through:
            # The rest of a long frame wsproto reads as it comes, up to that frame's end.
            end = min(len(raw), at + self._through)
            self._through -= end - at
            self._give(raw, at, end)
            return None
        if not self._in_message and (frame := _plain_frame(raw, at)) is not None:
            start, end = frame
            if end - start > max_bytes:
                raise wire.too_large(max_bytes)
            if end > len(raw):
                return None  # held here whole: under 64 KiB
            self._raw, self._at = (raw, end) if end < len(raw) else (b"", 0)
            return _unmask(raw, start, end)
        # The frames for wsproto that lie here before the next plain one are fed at once, so
        # that thousands of tiny frames cost one call, not one each.
        end = at
        while end < len(raw) and (end == at or self._in_message or _plain_frame(raw, end) is None):
            head = _frame_head(raw, end)
            if head is None:
                break
            start, size = head
            first = raw[end]
            opcode = first & 0x0F
            # wsproto holds a message begun until its final frame: every frame until then is
            # its own to check against the rules of continuation.
            if opcode in (1, 2):
                self._in_message = not first & 0x80
            elif opcode == 0 and first & 0x80:
                self._in_message = False
            if start + size > len(raw):
                self._through = start + size - len(raw)
                end = len(raw)
                break
            end = start + size
        if end > at:
            self._give(raw, at, end)
        return None

    def _give(self, raw: bytes, at: int, end: int) -> None:
        """Feed wsproto ``raw[at:end]``, keeping what follows for later."""
        assert self._ws is not None
        self._ws.receive_data(raw[at:end])
        self._raw, self._at = (raw, end) if end < len(raw) else (b"", 0)
        self._told = True

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

    async def accept(self, channel: Channel) -> tuple[WSConnection, bytes] | None:
        """Read one request. A WebSocket upgrade on ``/ws`` is accepted and its connection
        returned, with the bytes received behind the request; anything else is answered (a
        file, or an HTTP error), the channel closed and None returned."""
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

    async def _accept(self, channel: Channel) -> tuple[WSConnection, bytes] | None:
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


def _upgrade(
    channel: Channel, http: h11.Connection, request: h11.Request
) -> tuple[WSConnection, bytes] | None:
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
    leftover, _closed = http.trailing_data
    return ws, bytes(leftover)


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
