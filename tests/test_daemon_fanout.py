"""Fan-out over a real Unix socket to a daemon served in process (so that one audience's
narration can be made to fail): a subscriber whose events cannot be told is told so, with a
final error notification, and loses its subscriptions; the others go on."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from turnkeeper import app
from turnkeeper.combats import telling
from turnkeeper.transport.session import Sessions
from turnkeeper_sdk import wire

CALL_TIMEOUT = 20.0


class _Peer:
    """A raw client: requests out, every message in, in order."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.decoder = wire.Decoder()
        self.waiting: list[wire.Message | wire.WireError] = []
        self.msgid = 0
        self.events: list[wire.Notification] = []
        """The ``event`` notifications read while waiting for responses."""

    async def next(self) -> wire.Message | wire.WireError | None:
        """The next message, or None once the daemon closed the connection."""
        while not self.waiting:
            try:
                data = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return None
            self.waiting.extend(self.decoder.feed(data))
        return self.waiting.pop(0)

    async def call(self, method: str, **params: Any) -> Any:
        """Send a request and return its result; events read meanwhile are kept (a command's
        come before its response)."""
        self.msgid += 1
        await self.stream.send(wire.pack(wire.Request(self.msgid, method, params)))
        while True:
            message = await self.next()
            assert message is not None, f"closed before answering {method}"
            if isinstance(message, wire.Notification) and message.method == "event":
                self.events.append(message)
            elif isinstance(message, wire.Response) and message.msgid == self.msgid:
                assert message.error is None, message.error
                return message.result


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # A Unix socket's path must stay short (108 bytes): pytest's own directories may not.
    with tempfile.TemporaryDirectory(prefix="tk") as name:
        yield Path(name)


@pytest.mark.anyio
async def test_a_subscriber_whose_events_cannot_be_told_is_told_and_its_record_goes(
    tmp_path: Path, socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = app.Config(data_dir=tmp_path, socket_path=socket_dir / "tk.sock")
    with anyio.fail_after(CALL_TIMEOUT):
        async with anyio.create_task_group() as tg:
            sessions: Sessions = await tg.start(app.serve, config)
            told = _Peer(await anyio.connect_unix(config.socket_path))
            plain = _Peer(await anyio.connect_unix(config.socket_path))
            await told.call("hello", protocol=1, locale="pt-BR", narrate=True)
            await plain.call("hello", protocol=1)
            await plain.call("create_combat", combat_id="k", ruleset="marvel", request_id="c")
            await told.call("subscribe", combat="k", after=0)
            await plain.call("subscribe", combat="k", after=0)

            def broken(*args: object, **kwargs: object) -> str:
                raise RuntimeError("no words today")

            # Only the session that asked for narrated events has its events told.
            monkeypatch.setattr(telling, "narrate", broken)
            added = await plain.call(
                "add_combatant", combat="k", id="a", display_name="A", request_id="add"
            )
            assert plain.events[-1].params["seq"] == added["seq"]  # after its catch-up

            final = await told.next()
            assert isinstance(final, wire.Notification)
            assert final.method == "error"
            assert (final.params["code"], final.params["fatal"]) == ("subscription_lost", True)
            assert await told.next() is None  # closed after it

            # The registry, the one record, kept the other subscriber and nothing of the lost.
            subscribers = sessions.hub.subscriptions.subscribers("k")
            assert len(subscribers) == 1
            monkeypatch.undo()
            again = _Peer(await anyio.connect_unix(config.socket_path))
            await again.call("hello", protocol=1, locale="pt-BR", narrate=True)
            answer = await again.call("subscribe", combat="k", after=0)
            assert answer == {"combat": "k", "seq": added["seq"]}
            for stream in (told.stream, plain.stream, again.stream):
                await stream.aclose()
            tg.cancel_scope.cancel()
