"""R16 across tables, on a daemon served in process over a real Unix socket, so that a test can
hold the store at the moment a race needs: a table's walls hold while a request waits."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from turnkeeper import app
from turnkeeper.auth import Tokens
from turnkeeper.transport import session
from turnkeeper.transport.session import Sessions
from turnkeeper_sdk import wire

CALL_TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Peer:
    """A raw client, one request at a time: its answer, or its error's code."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.decoder = wire.Decoder()
        self.waiting: list[wire.Message | wire.WireError] = []
        self.msgid = 0

    async def answer(self, method: str, **params: Any) -> Any:
        """The result, or ``("error", code)``."""
        self.msgid += 1
        await self.stream.send(wire.pack(wire.Request(self.msgid, method, params)))
        while True:
            while not self.waiting:
                self.waiting.extend(self.decoder.feed(await self.stream.receive()))
            message = self.waiting.pop(0)
            if isinstance(message, wire.Response) and message.msgid == self.msgid:
                if message.error is not None:
                    return ("error", message.error.code)
                return message.result

    async def final(self) -> wire.Notification:
        """The next notification: the one that ends the session, if it ends."""
        while True:
            while not self.waiting:
                self.waiting.extend(self.decoder.feed(await self.stream.receive()))
            message = self.waiting.pop(0)
            if isinstance(message, wire.Notification) and message.method == "error":
                return message

    async def call(self, method: str, **params: Any) -> Any:
        got = await self.answer(method, **params)
        assert not (isinstance(got, tuple) and got[0] == "error"), got
        return got


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # A Unix socket's path must stay short (108 bytes): pytest's own directories may not.
    with tempfile.TemporaryDirectory(prefix="tk") as name:
        yield Path(name)


async def _peer(config: app.Config, secret: str | None = None) -> _Peer:
    assert config.socket_path is not None
    peer = _Peer(await anyio.connect_unix(config.socket_path))
    await peer.call("hello", protocol=1, **({} if secret is None else {"token": secret}))
    return peer


@pytest.mark.anyio
async def test_r16_tables_a_combat_made_while_a_command_waits_stays_out_of_reach(
    tmp_path: Path, socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table's narrator names a combat there is none of; while its command waits for the
    store's lookup of its request id, the operator makes that combat in the default table.
    The command is refused as of an unknown combat, and the combat gets nothing from it."""
    tokens = Tokens(tmp_path)
    table = tokens.add_table("Tee")
    _, secret = tokens.add("narrator", table=table.id)
    config = app.Config(data_dir=tmp_path, socket_path=socket_dir / "tk.sock")
    with anyio.fail_after(CALL_TIMEOUT):
        async with anyio.create_task_group() as tg:
            sessions: Sessions = await tg.start(app.serve, config)
            gm = await _peer(config)
            spy = await _peer(config, secret)
            store = sessions.hub.store
            looked_up, release = anyio.Event(), anyio.Event()
            lookup = store.lookup_request

            async def held(principal: str, request_id: str) -> Any:
                if request_id == "spy":
                    looked_up.set()
                    await release.wait()
                return await lookup(principal, request_id)

            monkeypatch.setattr(store, "lookup_request", held)
            refused: list[Any] = []

            async def send() -> None:
                refused.append(
                    await spy.answer(
                        "add_combatant",
                        request_id="spy",
                        combat="victim",
                        id="spy",
                        display_name="Spy",
                    )
                )

            tg.start_soon(send)
            await looked_up.wait()
            made = await gm.call(
                "create_combat", request_id="v", combat_id="victim", ruleset="marvel"
            )
            release.set()
            while not refused:
                await anyio.sleep(0.01)
            assert refused == [("error", "unknown_combat")]
            got = await gm.call("get_combat", combat="victim")
            assert got["seq"] == made["seq"]
            assert got["view"]["combatants"] == []
            for peer in (gm, spy):
                await peer.stream.aclose()
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_r16_tables_a_table_taken_back_is_out_of_reach_at_the_next_request(
    tmp_path: Path, socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token file is checked at every request of a hosting bridge, as for a revoked
    token: its very next request no longer reaches a table taken back from it, whatever it
    asks, and the session ends after that answer. (The daemon's own look at the file every
    ``TOKEN_CHECK_SECONDS`` is put off here, so that only the request can see the change.)"""
    monkeypatch.setattr(session, "TOKEN_CHECK_SECONDS", 3600.0)
    tokens = Tokens(tmp_path)
    host, secret = tokens.add("bridge", host=True)
    table = tokens.add_table("Tee")
    config = app.Config(data_dir=tmp_path, socket_path=socket_dir / "tk.sock")
    combat = f"{table.id}/fight"
    with anyio.fail_after(CALL_TIMEOUT):
        async with anyio.create_task_group() as tg:
            await tg.start(app.serve, config)
            gm = await _peer(config)
            await gm.call("create_combat", request_id="c", combat_id=combat, ruleset="marvel")
            for method, params in (
                ("get_combat", {}),
                ("history", {}),
                ("subscribe", {}),
                ("add_combatant", {"request_id": "late", "as": "u1", "id": "late"}),
            ):
                tokens.grant(table.id, host.id)
                h = await _peer(config, secret)
                assert (await h.call("get_combat", combat=combat))["combat"] == combat
                tokens.grant(table.id, host.id, granted=False)
                got = await h.answer(method, combat=combat, display_name="Late", **params)
                assert got == ("error", "unknown_combat"), method
                final = await h.final()
                assert (final.method, final.params["code"]) == ("error", "tables_changed")
                await h.stream.aclose()
            got = await gm.call("get_combat", combat=combat)
            assert got["view"]["combatants"] == []
            await gm.stream.aclose()
            tg.cancel_scope.cancel()
