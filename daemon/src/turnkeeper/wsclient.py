"""A WebSocket client with a socket's face, so the SDK's synchronous client speaks the protocol
over a daemon's ``--ws`` (or ``--http``) endpoint unchanged: ``sendall`` sends its bytes as one
binary message and ``recv`` returns the bytes of whole messages as they come. The WebSocket is
wsproto's, over a plain TCP socket; ``turnkeeper`` commands reach a daemon at ``ws://`` with it.
"""

from __future__ import annotations

import socket

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from turnkeeper_sdk import wire

RECV_BYTES = 65536
"""Bytes read per receive, as the SDK's client reads a socket."""


class WebSocketSocket:
    """One WebSocket connection to ``ws://host:port/path``, opened on construction."""

    def __init__(self, host: str, port: int, path: str = "/ws", timeout: float = 20.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.close_code: int | None = None
        self._ready: list[bytes] = []
        self._parts: list[bytes] = []
        self._held = 0
        """Bytes of the message being received: bounded as the daemon bounds a message."""
        try:
            # An IPv6 address is bracketed in the Host header, as in a URL (RFC 3986).
            authority = f"[{host}]" if ":" in host else host
            self.sock.sendall(self.ws.send(Request(host=f"{authority}:{port}", target=path)))
            while True:
                events = self._pump()
                if any(isinstance(e, AcceptConnection) for e in events):
                    break
                if any(isinstance(e, RejectConnection) for e in events):
                    raise ConnectionRefusedError(f"the WebSocket upgrade of {path} was refused")
                if self._ready:
                    raise ConnectionResetError("the connection closed during the WebSocket upgrade")
        except BaseException:
            self.sock.close()
            raise

    def _pump(self) -> list[Event]:
        data = self.sock.recv(RECV_BYTES)
        self.ws.receive_data(data or None)
        events = list(self.ws.events())
        for event in events:
            if isinstance(event, BytesMessage):
                self._held += len(event.data)
                if self._held > wire.MAX_MESSAGE_BYTES:
                    raise ConnectionResetError("the daemon sent a message over the size limit")
                self._parts.append(bytes(event.data))
                if event.message_finished:
                    self._ready.append(b"".join(self._parts))
                    self._parts = []
                    self._held = 0
            elif isinstance(event, TextMessage):
                # The protocol travels in binary frames only (protocol.md, WebSocket).
                raise ConnectionResetError("the daemon sent a text frame")
            elif isinstance(event, Ping):
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
                self._ready.append(b"")
        if not data and not self._ready:
            self._ready.append(b"")
        return events

    # The socket methods the SDK's client uses -------------------------------------------------

    def sendall(self, data: bytes, /) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def recv(self, size: int, /) -> bytes:
        """The bytes of the next whole message (``size`` is a socket's; a message is whole);
        ``b""`` once the daemon has closed."""
        while not self._ready:
            self._pump()
        data = self._ready.pop(0)
        if data == b"":
            self._ready.insert(0, b"")  # end of stream stays the end
        return data

    def settimeout(self, timeout: float | None, /) -> None:
        self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()
