"""A channel's writes are bounded by what its peer reads, and a WebSocket frame is RFC 6455's:
real sockets and a real WebSocket client, no daemon."""

from __future__ import annotations

import asyncio
import socket

import pytest
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage

from turnkeeper.transport.channel import OUTBOX_MESSAGES, Channel, UnixChannel
from turnkeeper.transport.websocket import _Framing

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
    while channel.post(MESSAGE):
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


def test_a_reply_goes_out_behind_the_events_posted_before_it() -> None:
    async def main() -> None:
        channel, peer = await _channel()
        assert channel.post(b"\x01")
        assert channel.post(b"\x02")
        channel.send(b"\x03")
        await asyncio.sleep(0.01)
        assert peer.recv(16) == b"\x01\x02\x03"
        channel.close()
        await channel.wait_closed()
        peer.close()

    asyncio.run(main())


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 70000])
def test_a_frame_reads_back_as_its_message_and_is_made_once_for_the_same_bytes(size: int) -> None:
    framing = _Framing()
    data = bytes(i % 251 for i in range(size))
    frame = framing(data)
    assert framing(data) is frame
    client = Connection(ConnectionType.CLIENT)
    client.receive_data(frame)
    (message,) = list(client.events())
    assert isinstance(message, BytesMessage)
    assert (bytes(message.data), message.message_finished) == (data, True)
