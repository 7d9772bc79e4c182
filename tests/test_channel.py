"""A channel's writes are bounded by what its peer reads, and a WebSocket frame is RFC 6455's:
real sockets and a real WebSocket client, no daemon."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import BytesMessage, Ping, Request

from turnkeeper.combats.telling import Batch
from turnkeeper.transport import channel as channel_module
from turnkeeper.transport.channel import OUTBOX_MESSAGES, Channel, UnixChannel
from turnkeeper.transport.websocket import Gate, WebSocketChannel, _frame
from turnkeeper_sdk import wire

MESSAGE = b"\x92\x02" + b"x" * 1022
"""1 KiB: OUTBOX_MESSAGES of them are more than a socket pair's buffers take."""


async def _channel() -> tuple[Channel, socket.socket]:
    ours, peer = socket.socketpair()
    accepted: list[Channel] = []
    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(lambda: UnixChannel(accepted.append), sock=ours)
    peer.setblocking(False)
    return accepted[0], peer


async def _post_until_refused(channel: Channel) -> int:
    posted = 0
    while channel.post(Batch([MESSAGE])):
        posted += 1
        if posted % 100 == 0:
            await asyncio.sleep(0)  # the posts so far are written
    return posted


def test_a_peer_that_stops_reading_is_refused_past_the_outbox_and_gets_room_as_it_reads() -> None:
    async def main() -> None:
        channel, peer = await _channel()
        posted = await _post_until_refused(channel)
        # The kernel took some, the outbox holds the rest, and no more.
        assert posted > OUTBOX_MESSAGES
        assert channel.room() == 0
        received = 0
        while channel.room() < OUTBOX_MESSAGES:
            try:
                received += len(peer.recv(1 << 20))
            except BlockingIOError:
                await asyncio.sleep(0.01)
        while received < posted * len(MESSAGE):
            try:
                received += len(peer.recv(1 << 20))
            except BlockingIOError:
                await asyncio.sleep(0.01)
        assert received == posted * len(MESSAGE)
        channel.close()
        await channel.wait_closed()
        peer.close()

    asyncio.run(main())


def test_a_batch_is_taken_whole_or_refused_whole_and_each_of_its_messages_takes_room() -> None:
    async def main() -> None:
        channel, peer = await _channel()
        await _post_until_refused(channel)
        while not channel.room():
            with contextlib.suppress(BlockingIOError):
                peer.recv(64 * 1024)
            await asyncio.sleep(0.01)
        room = channel.room()
        assert not channel.post(Batch([MESSAGE] * (room + 1)))
        assert channel.room() == room  # nothing of it was queued
        assert channel.post(Batch([MESSAGE] * room))
        assert channel.room() == 0
        channel.abort()
        peer.close()

    asyncio.run(main())


def test_a_reply_goes_out_behind_the_events_posted_before_it() -> None:
    async def main() -> None:
        channel, peer = await _channel()
        assert channel.post(Batch([b"\x01"]))
        assert channel.post(Batch([b"\x02"]))
        channel.send(b"\x03")
        await asyncio.sleep(0.01)
        assert peer.recv(16) == b"\x01\x02\x03"
        channel.close()
        await channel.wait_closed()
        peer.close()

    asyncio.run(main())


def test_what_is_posted_to_many_channels_goes_out_at_the_end_of_the_turn_despite_one_failing() -> (
    None
):
    async def main() -> None:
        (broken, _), (fine, peer) = await _channel(), await _channel()
        failures: list[BaseException] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: failures.append(context["exception"]))

        def refuse(data: bytes) -> None:
            raise OSError("refused")

        assert broken.transport is not None
        broken.transport.write = refuse  # type: ignore[method-assign]
        assert broken.post(Batch([b"\x01"]))
        assert fine.post(Batch([b"\x02"]))
        assert fine.post(Batch([b"\x03"]))
        await asyncio.sleep(0.01)
        assert peer.recv(16) == b"\x02\x03"
        assert [str(e) for e in failures] == ["refused"]
        fine.close()
        broken.abort()
        await fine.wait_closed()
        peer.close()

    asyncio.run(main())


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 70000])
def test_a_frame_reads_back_as_its_message_and_is_made_once_per_batch(size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    batch = Batch([data, b"\x01"])
    framed = batch.framed(_frame)
    assert batch.framed(_frame) is framed
    frames, ends = framed
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(frames)
    messages = list(client.events())
    assert all(isinstance(m, BytesMessage) and m.message_finished for m in messages)
    assert [bytes(m.data) for m in messages] == [data, b"\x01"]  # type: ignore[attr-defined]
    assert ends == (len(_frame(data)), len(frames))


def test_a_waiting_reply_gets_room_while_the_peer_reads_though_the_buffer_never_empties(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The transport says only when its buffer is empty again; a reply waiting for room must
    not time out while the peer reads on and events keep the buffer from emptying."""
    monkeypatch.setattr(channel_module, "SEND_TIMEOUT", 3.0)

    async def main() -> None:
        channel, peer = await _channel()
        await _post_until_refused(channel)
        waiter = asyncio.ensure_future(channel.wait_room())
        loop = asyncio.get_running_loop()
        start = loop.time()
        while not waiter.done() and loop.time() - start < 4:
            with contextlib.suppress(BlockingIOError):
                peer.recv(3 * 1024)
            channel.post(Batch([MESSAGE]))
            channel.post(Batch([MESSAGE]))
            await asyncio.sleep(0.005)
        assert waiter.done()
        assert waiter.exception() is None  # not the TimeoutError of SEND_TIMEOUT
        channel.abort()
        peer.close()

    asyncio.run(main())


def test_pings_from_a_peer_that_does_not_read_get_no_pile_of_pongs() -> None:
    """Pings are read as fast as they come: while bytes wait for the peer only the latest is
    answered, once they are out, so a peer pinging without reading costs a bounded buffer."""

    async def main() -> None:
        ours, peer = socket.socketpair()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        accepted: list[Channel] = []
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(
            lambda: WebSocketChannel(Gate(None), accepted.append), sock=ours
        )
        channel = accepted[0]
        client = WSConnection(ConnectionType.CLIENT)
        peer.sendall(client.send(Request(host="localhost", target="/ws")))
        assert await channel.open()
        await asyncio.sleep(0.05)
        peer.setblocking(False)
        client.receive_data(peer.recv(65536))  # the 101 answer: the WebSocket is open
        reader = asyncio.ensure_future(channel.next(wire.BEFORE_HELLO))
        pings = client.send(Ping(b"p" * 125)) * 2000
        sent = peak = 0
        for i in itertools.count():
            with contextlib.suppress(BlockingIOError):
                sent += peer.send(pings[sent % len(pings) :])
            await asyncio.sleep(0.001)
            if i % 20 == 0:
                with contextlib.suppress(BlockingIOError):
                    peer.recv(65536)  # a trickle, so the write never stalls
            assert channel.transport is not None
            peak = max(peak, channel.transport.get_write_buffer_size())
            if sent > 8 * 2**20:  # far more pings than the peer reads pongs
                break
        assert channel.gone is None
        assert peak < 64 * 1024
        reader.cancel()
        channel.abort()
        peer.close()

    asyncio.run(main())


def test_bytes_that_arrive_behind_a_message_the_callback_handed_over_wait_for_it() -> None:
    # The data callback decodes a message it cannot answer and hands it to the task with the
    # start of the next one still in the decoder; more bytes come before the task wakes.
    requests = [wire.pack(wire.Request(i, "get_combat", {"combat": "c"})) for i in (1, 2, 3)]

    async def main() -> None:
        channel, peer = await _channel()
        assert isinstance(channel, UnixChannel)
        channel.at_once = lambda _item: False
        task = asyncio.ensure_future(channel.next(wire.REQUESTS))
        await asyncio.sleep(0)  # the task waits for bytes
        channel.data_received(requests[0] + requests[1][:5])
        channel.data_received(requests[1][5:] + requests[2])
        got = [await task]
        got += [await channel.next(wire.REQUESTS), await channel.next(wire.REQUESTS)]
        assert [m.msgid for m in got if isinstance(m, wire.Request)] == [1, 2, 3]
        channel.close()
        await channel.wait_closed()
        peer.close()

    asyncio.run(main())


def test_a_loop_that_is_gone_leaves_no_flusher_behind() -> None:
    import gc

    async def main() -> None:
        channel, peer = await _channel()
        assert channel.post(Batch([b"\x01"]))
        await asyncio.sleep(0.01)
        channel.close()
        await channel.wait_closed()
        peer.close()

    before = len(channel_module._flushers)
    for _ in range(3):
        asyncio.run(main())
    gc.collect()
    assert len(channel_module._flushers) <= before


def test_a_closed_channel_and_its_session_are_freed_without_the_cyclic_collector() -> None:
    """A session holds its channel and the channel the session's handler: once the peer is
    gone the two must not stay a cycle, which (decoder buffers and all, about 100 KiB) only a
    full collection frees, rarely run in a daemon with many resident combats."""
    import gc
    import weakref

    class Session:
        def __init__(self, channel: Channel) -> None:
            self.channel = channel
            channel.at_once = self.handle

        def handle(self, _item: wire.Message | wire.WireError) -> bool:
            return False

    async def main() -> weakref.ref[Session]:
        channel, peer = await _channel()
        session = Session(channel)
        peer.send(wire.pack_value([0, 1, "hello", {}]))
        assert await channel.next(wire.Limits(1 << 16, 10_000)) is not None
        peer.close()
        assert await channel.next(wire.Limits(1 << 16, 10_000)) is None
        channel.close()  # as a session does once its peer is gone
        await channel.wait_closed()
        return weakref.ref(session)

    gc.disable()
    try:
        gone = asyncio.run(main())
        assert gone() is None
    finally:
        gc.enable()


def _resident_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_memory_freed_in_the_heap_goes_back_to_the_system_once_connections_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Buffers under glibc's mmap threshold, freed below a value that lives on, stay resident
    until something trims the heap: closed connections have it done once their burst is over."""
    from turnkeeper.transport import trim

    monkeypatch.setattr(trim, "TRIM_DELAY", 0.05)
    chunks = [b"x" * (64 * 1024 - 100) for _ in range(400)]  # 25 MiB from the heap, touched
    stays = chunks[::10]  # between the freed ones: the heap cannot shrink from its top
    del chunks
    freed = _resident_kib()

    async def main() -> None:
        for _ in range(3):
            channel, peer = await _channel()
            peer.close()
            assert await channel.next(wire.Limits(1 << 16, 10_000)) is None
            channel.close()
            await channel.wait_closed()
        await asyncio.sleep(0.3)

    asyncio.run(main())
    assert _resident_kib() < freed - 15 * 1024
    assert stays


def test_a_websocket_peer_quiet_in_the_middle_of_a_frame_holds_only_that_frames_bytes() -> None:
    """The bytes of a read go with the messages read from them: a peer that stops after the
    start of a frame holds that start, not the whole read it came in."""

    async def main() -> None:
        ours, peer = socket.socketpair()
        accepted: list[Channel] = []
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(
            lambda: WebSocketChannel(Gate(None), accepted.append), sock=ours
        )
        channel = accepted[0]
        assert isinstance(channel, WebSocketChannel)
        client = WSConnection(ConnectionType.CLIENT)
        peer.sendall(client.send(Request(host="localhost", target="/ws")))
        assert await channel.open()
        await asyncio.sleep(0.05)
        client.receive_data(peer.recv(65536))  # the 101 answer: the WebSocket is open
        request = wire.pack(wire.Request(1, "list_combats", {}))
        frames = client.send(Ping(b"p")) + client.send(BytesMessage(request)) * 2000
        tail = client.send(BytesMessage(request))[:9]
        peer.sendall(frames + tail)
        read = 0
        while read < 2000:
            item = await asyncio.wait_for(channel.next(wire.BEFORE_HELLO), 5)
            assert isinstance(item, wire.Request)
            read += 1
        waiting = asyncio.ensure_future(channel.next(wire.BEFORE_HELLO))
        await asyncio.sleep(0.05)  # the task waits for the rest of the last frame
        assert not waiting.done()
        assert len(channel._raw) - channel._at == 9
        assert len(channel._raw) < 100  # not the ~40 KB the frames came in
        waiting.cancel()
        channel.abort()
        peer.close()

    asyncio.run(main())


@pytest.mark.parametrize("failure", [AttributeError, OSError, TypeError, ImportError])
def test_a_system_without_malloc_trim_gives_nothing_back_and_never_fails_a_close(
    monkeypatch: pytest.MonkeyPatch, failure: type[Exception]
) -> None:
    """musl and macOS have no ``malloc_trim``, Windows no ``CDLL(None)``, a Python may lack
    ctypes: the look-up, made at a connection's close, finds nothing to call and raises nothing."""
    import ctypes

    from turnkeeper.transport import trim

    def missing(_name: object) -> object:
        raise failure("no malloc_trim here")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    trim._malloc_trim.cache_clear()
    try:

        async def main() -> None:
            loop = asyncio.get_running_loop()
            trim.after_close(loop)
            assert loop not in trim._due  # nothing scheduled

        asyncio.run(main())
    finally:
        trim._malloc_trim.cache_clear()
