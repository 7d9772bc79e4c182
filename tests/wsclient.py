"""A WebSocket client with a socket's face, so every protocol test can run over ``--ws`` too.

``sendall`` sends its bytes as one binary message and ``recv`` returns the bytes of whole
messages as they come: the SDK's synchronous client, which feeds a streaming decoder, works over
it unchanged. It is a real WebSocket (wsproto) over a real TCP socket.
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

RECV_BYTES = 65536


class WebSocketClosedError(ConnectionResetError):
    """The daemon sent a close frame; ``code`` is its close code."""

    def __init__(self, code: int) -> None:
        super().__init__(f"websocket closed with {code}")
        self.code = code


class WebSocketSocket:
    """One WebSocket connection to ``ws://host:port/path``."""

    def __init__(self, host: str, port: int, path: str = "/ws", timeout: float = 20.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.close_code: int | None = None
        self._ready: list[bytes] = []
        self._parts: list[bytes] = []
        self.sock.sendall(self.ws.send(Request(host=f"{host}:{port}", target=path)))
        while True:
            events = self._pump()
            if any(isinstance(e, AcceptConnection) for e in events):
                break
            if any(isinstance(e, RejectConnection) for e in events):
                raise ConnectionRefusedError("the WebSocket upgrade was refused")

    def _pump(self) -> list[Event]:
        data = self.sock.recv(RECV_BYTES)
        self.ws.receive_data(data or None)
        events = list(self.ws.events())
        for event in events:
            if isinstance(event, BytesMessage):
                self._parts.append(bytes(event.data))
                if event.message_finished:
                    self._ready.append(b"".join(self._parts))
                    self._parts = []
            elif isinstance(event, TextMessage):
                raise AssertionError(f"the daemon sent a text frame: {event.data!r}")
            elif isinstance(event, Ping):
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
                self._ready.append(b"")
        if not data and not self._ready:
            self._ready.append(b"")
        return events

    # The socket methods the SDK client uses ---------------------------------------------------

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(TextMessage(data=text)))

    def recv(self, _size: int) -> bytes:
        while not self._ready:
            self._pump()
        data = self._ready.pop(0)
        if data == b"":
            self._ready.insert(0, b"")  # end of stream stays the end
        return data

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()
