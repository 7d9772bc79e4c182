"""A daemon stopping on a failure, served in process over a real Unix socket: the sessions are
stopped without the drain that refuses new commands first, so a request already read when they
stop must get its answer, never silence."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from test_daemon_fanout import _Peer
from turnkeeper import app
from turnkeeper.transport.session import Sessions
from turnkeeper_sdk import wire

CALL_TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # A Unix socket's path must stay short (108 bytes): pytest's own directories may not.
    with tempfile.TemporaryDirectory(prefix="tk") as name:
        yield Path(name)


@pytest.mark.anyio
async def test_a_command_read_as_the_sessions_stop_is_refused_with_shutting_down(
    tmp_path: Path, socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sessions stop (their task group failed) after a command was read and before it
    reached ``begin_command``: its session's task is cancelled already, so the command would
    be cut at its first wait. It is refused instead, and nothing of it is applied."""
    config = app.Config(data_dir=tmp_path, socket_path=socket_dir / "tk.sock")
    with anyio.fail_after(CALL_TIMEOUT):
        async with anyio.create_task_group() as tg:
            sessions: Sessions = await tg.start(app.serve, config)
            peer = _Peer(await anyio.connect_unix(config.socket_path))
            await peer.call("hello", protocol=1)
            begin_command = sessions.begin_command

            def stopped_first(*args: Any) -> Any:
                sessions.stop()
                return begin_command(*args)

            monkeypatch.setattr(sessions, "begin_command", stopped_first)
            peer.msgid += 1
            request = {"combat_id": "k", "ruleset": "marvel", "request_id": "c"}
            await peer.stream.send(wire.pack(wire.Request(peer.msgid, "create_combat", request)))
            answer = await peer.next()
            assert isinstance(answer, wire.Response), answer
            assert answer.error is not None
            assert answer.error.code == "shutting_down"
            assert await sessions.hub.summaries() == []
            await peer.stream.aclose()
            tg.cancel_scope.cancel()
