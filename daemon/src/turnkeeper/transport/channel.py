"""Bytes ⇄ messages, one class per transport, on ``asyncio.Protocol``.

The event loop reads each socket and hands the bytes over (``data_received``); the session's
task takes them when it is ready for the next message, so a peer is read only as fast as its
requests are answered. Replies and events are written straight to the transport: a fan-out to
many subscribers wakes no task per subscriber. What the kernel does not take at once waits in
the transport's buffer, which is bounded per peer (``OUTBOX_MESSAGES``) and watched for progress
(``WRITE_STALL``): a peer that stops reading is disconnected, never buffered for without end.

The layers above never ask which transport they have: every channel has the same methods, and a
transport's differences (who the peer is, how messages are framed) live in its class.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

import anyio

from turnkeeper_sdk import wire

from . import trim

if TYPE_CHECKING:
    from ..combats.telling import Batch

OUTBOX_MESSAGES = 1024
"""Messages waiting for one peer beyond what the kernel took. An event for a subscriber with
this many waiting finds it too slow: it is disconnected (``slow_consumer``) rather than let the
daemon's memory grow."""
SEND_TIMEOUT = 30.0
"""A reply that cannot be queued for this long (its peer has ``OUTBOX_MESSAGES`` waiting) means
the peer stopped reading."""
WRITE_STALL = 5.0
"""Seconds the bytes waiting for a peer may make no progress into the socket: the connection is
then dropped, so a stuck peer never holds a connection slot, or its buffer, for long."""
ROOM_POLL = 0.05
"""Seconds between two looks at ``room`` while a reply waits for it: the transport says only
when its buffer is empty again, and a peer that reads on while events keep coming may never
empty it, though room comes back with each message it reads."""
READ_AHEAD = 65536
"""Bytes received and not yet decoded beyond which the socket is no longer read: a peer that
sends faster than its requests are answered waits in the kernel, not in the daemon's memory."""


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


def peer_address(transport: asyncio.BaseTransport) -> str | None:
    """A TCP peer's address as the per-address bounds count it."""
    peer: Any = transport.get_extra_info("peername")
    return peer_key(str(peer[0])) if peer else None


class _Flusher:
    """The channels with messages posted in this turn of the loop, all written by one callback
    at its end: a command's events for 500 subscribers cost one callback, not 500."""

    def __init__(self) -> None:
        self.due: list[Channel] = []
        """The channels to write; a channel adds itself (``Channel.post``), and schedules
        ``run`` when it is the first."""

    def run(self) -> None:
        due, self.due = self.due, []
        for channel in due:
            try:
                channel._flush()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as e:
                # One channel's failure is its own, as when each had a callback: the others'
                # messages still go out.
                channel._loop.call_exception_handler(
                    {"message": "a channel failed", "exception": e}
                )


_flushers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Flusher] = (
    weakref.WeakKeyDictionary()
)


def _flusher(loop: asyncio.AbstractEventLoop) -> _Flusher:
    # The flusher holds no reference to its loop, so a loop's entry goes with the loop.
    found = _flushers.get(loop)
    if found is None:
        found = _flushers[loop] = _Flusher()
    return found


def _unframed(data: bytes) -> bytes:
    """A byte stream's framing: msgpack delimits its messages itself."""
    return data


class Channel(asyncio.Protocol):
    """One connection's bytes: read on demand, written at once, bounded both ways."""

    kind: ClassVar[str]
    """The transport's name, as admission counts it and the logs show it."""

    def __init__(self, accepted: Callable[[Channel], None]) -> None:
        self._accepted = accepted
        self.transport: asyncio.Transport | None = None
        self.peer_uid: int | None = None
        """The peer's uid on the Unix socket; None elsewhere."""
        self.address: str | None = None
        """The peer's address (``peer_key``) on TCP and WebSocket; None on the Unix socket."""
        self.gone: str | None = None
        """Why the transport ended on its own (``peer_gone``, ``write_stalled``), if it did."""
        self.at_once: Callable[[wire.Message | wire.WireError], bool] | None = None
        """The session's way to handle a message as soon as it is decoded, while its task waits
        for the next one: True when it did (answered it), False to leave it to the task. A
        transport that decodes as bytes arrive calls it; the others leave everything to the
        task (``next``)."""
        self._handed: wire.Message | wire.WireError | None = None
        """A message decoded on arrival and left to the session's task, which ``next`` gives
        it before decoding any further."""
        self._chunks: deque[bytes] = deque()
        self._chunk_bytes = 0
        self._eof = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._closing = False
        self._written = 0
        """Bytes handed to the transport so far."""
        self._ends: deque[int] = deque()
        """Where each message still (partly) in the transport's buffer ends, in ``_written``."""
        self._corked: list[tuple[bytes, tuple[int, ...]]] = []
        """Bytes posted (``post``), written together at the end of this turn of the loop, each
        with where its messages end in it."""
        self._corked_messages = 0
        """How many messages ``_corked`` holds."""
        self._writing_paused = False
        self._room_waiter: asyncio.Future[None] | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._stall_mark = 0
        self.framing: Callable[[bytes], bytes] | None = _unframed
        """How the transport frames a packed message; None once no message may be sent."""
        self._loop = asyncio.get_running_loop()
        self._flusher = _flusher(self._loop)
        self._lost: asyncio.Future[None] = self._loop.create_future()

    # asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's stream transports (``serve --loop``) have
        # every method of ``asyncio.Transport`` without deriving from it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        # Told of the first byte the kernel does not take and of the buffer's last byte going:
        # between the two, the messages waiting are counted (``room``) and progress watched.
        transport.set_write_buffer_limits(high=0, low=0)
        self.identify(transport)
        self._accepted(self)

    def identify(self, transport: asyncio.Transport) -> None:
        """Learn who the peer is (``peer_uid``, ``address``)."""

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._chunk_bytes += len(data)
        if self._chunk_bytes > READ_AHEAD and not self._reading_paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self._reading_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # Kept open for writing: the answers to what was sent before the EOF still go out.
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.gone is None:
            self.gone = "peer_gone"  # a reset or a broken pipe, not a close
        # No message arrives any more: the session's handler, which holds its session and so
        # this channel, is let go, so that the two are freed by reference counting when the
        # session ends rather than left (decoder buffers and all) to a full collection.
        self.at_once = None
        self._eof = self._closing = True
        self._wake()
        self._wake_room()
        if self._stall is not None:
            self._stall.cancel()
        if not self._lost.done():
            self._lost.set_result(None)
        trim.after_close(self._loop)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._stall_mark = self._flushed()
        self._stall = self._loop.call_later(WRITE_STALL, self._check_stall)

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._ends.clear()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._wake_room()
        self._drained()

    def _drained(self) -> None:
        """What the transport does once everything written has gone out."""

    # Reading -----------------------------------------------------------------------------------

    async def open(self) -> bool:
        """Whatever the transport needs before messages flow; False if the connection ended
        there (it carried no session)."""
        return True

    async def next(self, limits: wire.Limits) -> wire.Message | wire.WireError | None:
        """The next message, or the error for the next bad one, held to ``limits``; None once
        the peer or the daemon closed the connection."""
        raise NotImplementedError

    async def receive(self) -> bytes:
        """The next bytes received; empty once nothing more will come, or while a message the
        data callback decoded waits to be taken (the decoder still holds the bytes behind it,
        so bytes that came since must wait for it)."""
        while not self._chunks or self._handed is not None:
            if self._eof or self._handed is not None:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._closing:
            return b""
        data = self._chunks.popleft()
        self._chunk_bytes -= len(data)
        if self._reading_paused and self._chunk_bytes <= READ_AHEAD:
            assert self.transport is not None
            self.transport.resume_reading()
            self._reading_paused = False
        return data

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _hand(self, item: wire.Message | wire.WireError) -> None:
        """Leave ``item``, decoded on arrival, to the session's task (``_handed``)."""
        self._handed = item
        self._wake()

    # Writing -----------------------------------------------------------------------------------

    def room(self) -> int:
        """How many more messages may wait for this peer."""
        if not self._writing_paused:
            return OUTBOX_MESSAGES - self._corked_messages
        flushed = self._flushed()
        ends = self._ends
        while ends and ends[0] <= flushed:
            ends.popleft()
        return max(0, OUTBOX_MESSAGES - len(ends) - self._corked_messages)

    async def wait_room(self) -> None:
        """Until a message may be queued (or the connection is gone); ``TimeoutError`` after
        ``SEND_TIMEOUT``."""
        with anyio.fail_after(SEND_TIMEOUT):
            while not self._closing and not self.room():
                self._room_waiter = self._loop.create_future()
                try:
                    with anyio.move_on_after(ROOM_POLL):
                        await self._room_waiter
                finally:
                    self._room_waiter = None

    def _wake_room(self) -> None:
        if self._room_waiter is not None and not self._room_waiter.done():
            self._room_waiter.set_result(None)

    def send(self, data: bytes) -> None:
        """Write one packed message now, behind those sent soon before it; nothing once the
        channel is closing."""
        # A byte stream's framing is none (``_unframed``): its replies spare the call.
        framed = data if self.framing is _unframed else self.frame(data)
        if self._closing or not framed:
            return
        if self._corked:
            self._corked.append((framed, (len(framed),)))
            self._flush()
            return
        # ``put`` of one message, spelled out: every reply comes this way.
        assert self.transport is not None
        self._written += len(framed)
        self.transport.write(framed)
        if self._writing_paused:
            self._ends.append(self._written)

    def post(self, batch: Batch) -> bool:
        """Write a batch of packed messages at the end of this turn of the loop, with every
        other posted meanwhile: a command's events reach a subscriber in one write. The batch
        is framed once for all the channels of this transport it is posted to. False, and
        nothing written, when the peer has no room for all its messages."""
        # A fan-out comes this way once per subscriber: what is done here is done 500 times
        # for a command with 500 subscribers, hence no calls that can be spared.
        count = len(batch.messages)
        corked = self._corked_messages + count
        if (self._writing_paused or corked > OUTBOX_MESSAGES) and self.room() < count:
            return False
        framing = self.framing
        if self._closing or framing is None:
            return True
        if not self._corked:
            flusher = self._flusher
            if not flusher.due:
                self._loop.call_soon(flusher.run)
            flusher.due.append(self)
        self._corked.append(batch.framed(framing))
        self._corked_messages = corked
        return True

    def _flush(self) -> None:
        corked, self._corked = self._corked, []
        self._corked_messages = 0
        if not corked or self._closing:
            return
        # ``put``, spelled out: a fan-out comes this way once per subscriber.
        start = self._written
        data = corked[0][0] if len(corked) == 1 else b"".join([data for data, _ in corked])
        self._written += len(data)
        assert self.transport is not None
        self.transport.write(data)
        if self._writing_paused:
            for data, ends in corked:
                self._ends.extend([start + end for end in ends])
                start += len(data)

    def frame(self, data: bytes) -> bytes:
        """A packed message as the transport carries it; empty once none may be sent. A byte
        stream's is the message itself (``_unframed``), with no call: every reply comes here."""
        return data

    def put(self, data: bytes) -> None:
        """Write bytes as they are: the transport's own (a handshake, a control frame)."""
        if self._closing:
            return
        if self._corked:
            self._flush()
        assert self.transport is not None
        self._written += len(data)
        self.transport.write(data)

    def _flushed(self) -> int:
        assert self.transport is not None
        return self._written - self.transport.get_write_buffer_size()

    def _check_stall(self) -> None:
        flushed = self._flushed()
        if flushed == self._stall_mark:
            self.gone = "write_stalled"
            assert self.transport is not None
            self.transport.abort()
            return
        self._stall_mark = flushed
        self._stall = self._loop.call_later(WRITE_STALL, self._check_stall)

    # Closing -----------------------------------------------------------------------------------

    def close(self, final: bytes | None = None) -> None:
        """Send ``final`` (a packed fatal error notification) if given, then close once what
        is buffered is written: within ``WRITE_STALL`` of its last progress, or dropped."""
        if self._closing:
            return
        self._flush()
        if final is not None:
            self.send(final)
        self._goodbye(refused=final is not None)
        self._closing = self._eof = True
        self._wake()
        self._wake_room()
        assert self.transport is not None
        self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is buffered: for a peer not worth an answer."""
        self._corked = []
        self._corked_messages = 0
        self._closing = self._eof = True
        self._wake()
        self._wake_room()
        assert self.transport is not None
        self.transport.abort()

    def _goodbye(self, *, refused: bool) -> None:
        """The transport's last words before it closes."""

    async def wait_closed(self) -> None:
        """Until the transport is closed; at most ``WRITE_STALL`` after its last progress."""
        await asyncio.shield(self._lost)


class UnixChannel(Channel):
    """The Unix socket: a byte stream from a peer of known uid."""

    kind = "unix"

    def __init__(self, accepted: Callable[[Channel], None]) -> None:
        super().__init__(accepted)
        self._decoder: wire.Decoder | None = None

    def identify(self, transport: asyncio.Transport) -> None:
        raw = transport.get_extra_info("socket")
        creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        self.peer_uid = int(uid)

    def data_received(self, data: bytes) -> None:
        decoder = self._decoder
        waiter = self._waiter
        if (
            self.at_once is None
            or decoder is None
            or waiter is None
            or waiter.done()
            or self._chunks
            or self._closing
        ):
            super().data_received(data)
            return
        # The session's task waits in ``next`` for these very bytes with nothing else held, so
        # its decoder has used up what it had: decoded here, each message the session can
        # answer at once costs no wake-up of its task and no turn of the loop; the first it
        # cannot is handed over with the bytes behind it, and read as the task would have.
        try:
            decoder.push(data)
        except wire.WireError as e:
            self._hand(e)
            return
        while True:
            item = decoder.next()
            if item is None:
                return
            if not self.at_once(item):
                self._hand(item)
                return
            # Mostly one request per read: once its bytes are used up, asking the decoder for
            # another would cost a failed read of msgpack's for each request.
            if self._closing or not decoder.pending:
                return

    async def next(self, limits: wire.Limits) -> wire.Message | wire.WireError | None:
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = wire.Decoder(limits)
        else:
            # Limits change only right after a request (a hello), between two messages.
            decoder.limit(limits)
        while True:
            item = self._handed
            if item is None:
                item = decoder.next()
            else:
                self._handed = None
            if item is not None:
                return item
            data = await self.receive()
            if not data:
                if self._handed is not None:
                    continue
                return None
            try:
                decoder.push(data)
            except wire.WireError as e:
                return e


class TcpChannel(UnixChannel):
    """TCP: the same byte stream, from a peer known by its address."""

    kind = "tcp"

    def identify(self, transport: asyncio.Transport) -> None:
        self.address = peer_address(transport)
