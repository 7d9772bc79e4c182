"""The daemon's WebSocket client (``turnkeeper.wsclient``), so every protocol test can run over
``--ws`` too, with what only tests do: send a text frame, which the daemon must refuse."""

from __future__ import annotations

from wsproto.events import TextMessage

from turnkeeper.wsclient import WebSocketSocket as _WebSocketSocket


class WebSocketSocket(_WebSocketSocket):
    """One WebSocket connection to ``ws://host:port/path``."""

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(TextMessage(data=text)))
