"""The async client against a real daemon process: typed calls, errors as data, subscriptions,
and a session that survives the daemon being killed and restarted."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream, TaskGroup

from daemon import Daemon, create_many, running
from turnkeeper.combats.registry import MAX_COMBAT_PAGE
from turnkeeper_engine.model import ActionSpec, TurnRef
from turnkeeper_sdk import wire
from turnkeeper_sdk.aio import AsyncClient, CommandResult, Event, Subscription
from turnkeeper_sdk.errors import CallError, ConnectionLost, TooFarBehindError

WAIT = 10.0
"""Seconds any one step of a test may take: far more than it needs, so a hang fails fast."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with running(tmp_path) as d:
        yield d


async def _bank(client: AsyncClient) -> int:
    """A marvel combat in round 1, Spider-Man's turn; returns its last seq."""
    await client.create_combat(combat_id="bank", ruleset="marvel")
    await client.add_combatant(
        "bank", id="spidey", display_name="Spider-Man", player_character=True, faces=(6, 6, 6)
    )
    await client.add_combatant("bank", id="ock", display_name="Doctor Octopus", faces=[2, 2, 2])
    return (await client.start_combat("bank"))["seq"]


async def _until(events: Subscription, seqs: dict[str, int]) -> list[Event]:
    """Events read until each combat named has reached its seq."""
    got: list[Event] = []
    reached = dict.fromkeys(seqs, 0)
    with anyio.fail_after(WAIT):
        async for event in events:
            got.append(event)
            reached[event["combat"]] = event["seq"]
            if all(reached[c] >= seq for c, seq in seqs.items()):
                break
    return got


async def _read_all(subscription: Subscription, into: list[Event]) -> None:
    with anyio.fail_after(WAIT):
        async with subscription as events:
            async for event in events:
                into.append(event)


def _seqs(events: list[Event], combat: str) -> list[int]:
    return [e["seq"] for e in events if e["combat"] == combat]


@pytest.mark.anyio
async def test_typed_calls_run_a_small_marvel_combat(daemon: Daemon) -> None:
    async with AsyncClient.unix(daemon.socket) as client:
        assert client.session["role"] == "narrator"
        assert (await client.hello())["protocol"] == wire.PROTOCOL_VERSION
        assert await _bank(client) == 12
        attack = ActionSpec("attack", targets=("ock",))
        declared = await client.declare_action("bank", turn=TurnRef(1, "spidey"), action=attack)
        assert [e["event"] for e in declared["events"]] == [
            "command_recorded",
            "action_declared",
            "action_resolved",
        ]
        await client.end_turn("bank", turn=TurnRef(1, "spidey"))
        # Plain maps do as well as the engine's values.
        ended = await client.end_turn("bank", turn={"round": 1, "combatant": "ock"})
        assert "round_started" in [e["event"] for e in ended["events"]]
        combat = await client.get_combat("bank")
        assert combat["seq"] == ended["seq"]
        assert (combat["view"]["turn"]["round"], combat["view"]["turn"]["combatant"]) == (
            2,
            "spidey",
        )
        page = await client.history("bank", after=12, limit=3)
        assert ([e["seq"] for e in page["events"]], page["until"]) == ([13, 14, 15], 15)
        assert await client.list_combats() == [
            {"combat": "bank", "ruleset": "marvel", "phase": "rounds", "round": 2, "seq": 23}
        ]
        # The generic call gives a command its request id as the typed methods do.
        created = await client.call("create_combat", combat_id="vault", ruleset="dnd3e")
        assert created["seq"] == 2


def _named(result: CommandResult, event: str) -> None:
    """Check a command was recorded and had ``event`` among its events."""
    names = [e["event"] for e in result["events"]]
    assert names[0] == "command_recorded", names
    assert event in names, names


def _one(result: CommandResult, event: str) -> dict[str, Any]:
    return next(e for e in result["events"] if e["event"] == event)


@pytest.mark.anyio
async def test_every_typed_command_method_is_applied_by_a_live_daemon(daemon: Daemon) -> None:
    # The bookkeeping and narrator tools a small combat does not reach, each called once
    # through its typed method and checked by the event the daemon answers with.
    async with AsyncClient.unix(daemon.socket) as client:
        await client.create_combat(combat_id="all", ruleset="marvel")
        for who, group in (("spidey", None), ("ock", None), ("thug", None), ("h1", "hydra")):
            await client.add_combatant("all", id=who, display_name=who.title(), group=group)
        await client.add_combatant("all", id="h2", display_name="H2", group="hydra")
        await client.add_combatant("all", id="goon", display_name="Goon", hidden=True)
        _named(await client.reveal_combatant("all", combatant="goon"), "combatant_revealed")
        _named(await client.mark_surprised("all", combatant="thug"), "surprise_marked")
        rolled = await client.roll_initiative("all", combatant="spidey", faces=(6, 6, 6))
        _named(rolled, "initiative_rolled")
        _named(await client.order_ties("all", combatants=["ock", "thug"]), "ties_ordered")
        _named(
            await client.reorder_group("all", group="hydra", combatants=["h2", "h1"]),
            "group_reordered",
        )
        await client.start_combat("all")
        _named(await client.surprise("all", target="ock", by=["spidey"]), "condition_applied")
        opened = await client.announce_trigger("all", facts={"event": "attack"}, offer=["ock"])
        window = _one(opened, "window_opened")["window"]["id"]
        _named(await client.close_window("all", window=window), "window_closed")
        applied = await client.apply_condition("all", target="ock", type="custom", note="webbed")
        condition = _one(applied, "condition_applied")["condition"]["id"]
        _named(await client.remove_condition("all", condition=condition), "condition_removed")
        recorded = await client.record_outcome(
            "all", kind="dc", text="DC 15", values={"dc": 15}, template="DC {dc}", args={"dc": 15}
        )
        _named(recorded, "outcome_recorded")
        _named(await client.disable_plugin("all", plugin="surprise"), "plugin_disabled")
        _named(await client.enable_plugin("all", plugin="surprise"), "plugin_enabled")
        assert (await client.tick("all"))["events"] == []  # nothing is due yet
        _named(await client.defeat_combatant("all", combatant="goon"), "combatant_defeated")
        _named(await client.revive_combatant("all", combatant="goon"), "combatant_revived")
        _named(await client.remove_combatant("all", combatant="thug"), "combatant_removed")
        _named(await client.undo("all"), "command_undone")
        view = (await client.get_combat("all"))["view"]
        assert [c["status"] for c in view["combatants"] if c["id"] == "thug"] == ["active"]


@pytest.mark.anyio
async def test_an_error_response_raises_call_error_with_the_protocols_code_and_field(
    daemon: Daemon,
) -> None:
    async with AsyncClient.unix(daemon.socket) as client:
        await _bank(client)
        with pytest.raises(CallError) as stale:
            await client.end_turn("bank", turn=TurnRef(1, "ock"))
        assert (stale.value.code, stale.value.field) == ("stale_turn", "turn")
        with pytest.raises(CallError) as unknown:
            await client.get_combat("nowhere")
        assert (unknown.value.code, unknown.value.field) == ("unknown_combat", "combat")
        # as_user travels as "as", which only a bridge may send.
        with pytest.raises(CallError) as forbidden:
            await client.end_combat("bank", as_user="u1")
        assert (forbidden.value.code, forbidden.value.field) == ("forbidden", "as")
        with pytest.raises(ValueError, match="subscribe"):
            await client.call("subscribe", combat="bank")


@pytest.mark.anyio
async def test_a_client_that_asks_for_pt_br_gets_the_daemons_messages_in_portuguese(
    daemon: Daemon,
) -> None:
    async with AsyncClient.unix(daemon.socket, locale="pt-BR") as client:
        assert client.session["locale"] == "pt-BR"
        with pytest.raises(CallError) as unknown:
            await client.get_combat("nowhere")
        assert (unknown.value.code, unknown.value.field) == ("unknown_combat", "combat")
        assert unknown.value.message == "não há combate 'nowhere'"


@pytest.mark.anyio
async def test_subscribe_yields_events_in_seq_order_from_after_then_live(daemon: Daemon) -> None:
    async with AsyncClient.unix(daemon.socket) as client:
        await client.create_combat(combat_id="bank", ruleset="marvel")
        await client.add_combatant("bank", id="spidey", display_name="Spider-Man")
        async with client.subscribe("bank", after=2) as events:
            assert events.result == {"combat": "bank", "seq": 4}
            started = await client.start_combat("bank")
            got = await _until(events, {"bank": started["seq"]})
        assert _seqs(got, "bank") == list(range(3, started["seq"] + 1))
        assert got[0]["event"] == "command_recorded"
        assert got[-3:] == [{"combat": "bank", **e} for e in started["events"][-3:]]
        with pytest.raises(CallError) as twice:
            async with client.subscribe("bank"), client.subscribe("bank"):
                pass
        assert twice.value.code == "already_subscribed"


@pytest.mark.anyio
async def test_a_subscriber_that_falls_behind_gets_its_buffered_events_then_an_error(
    daemon: Daemon,
) -> None:
    async with AsyncClient.unix(daemon.socket, event_buffer=3) as client:
        await _bank(client)
        got: list[Event] = []
        with pytest.raises(TooFarBehindError) as behind:
            await _read_all(client.subscribe("bank"), got)
        assert _seqs(got, "bank") == [1, 2, 3]
        assert behind.value.seqs == {"bank": 3}
        # Resuming from where it stopped works, and the daemon has forgotten the failed one.
        async with client.subscribe("bank", after=3) as events:
            assert events.result["seq"] == 12


@pytest.mark.anyio
async def test_a_subscription_resumes_after_the_daemon_is_killed_with_no_gap_or_duplicate(
    daemon: Daemon,
) -> None:
    async with AsyncClient.unix(daemon.socket, reconnect_timeout=WAIT) as client:
        seq = await _bank(client)
        async with client.subscribe("bank", after=0) as events:
            before = await _until(events, {"bank": seq})
            first_session = client.session["connection"]
            daemon.kill()
            await anyio.to_thread.run_sync(daemon.start)
            # Another client plays on while this one may still be reconnecting.
            other = await anyio.to_thread.run_sync(daemon.client)
            other.call(
                "end_turn", request_id="e1", combat="bank", turn={"round": 1, "combatant": "spidey"}
            )
            # A command of this client waits for the reconnect, then goes through.
            last = await client.end_turn("bank", turn=TurnRef(1, "ock"))
            after = await _until(events, {"bank": last["seq"]})
        assert client.session["connection"] != first_session
        assert _seqs(before + after, "bank") == list(range(1, last["seq"] + 1))


class LossyProxy:
    """A Unix socket in front of the daemon's: forwards everything, message by message, until
    the test cuts its connections, refuses new ones, or has it lose the next reply."""

    def __init__(self, path: Path, upstream: Path) -> None:
        self.path = path
        self.upstream = upstream
        self.refusing = False
        self.on_lost_reply: Callable[[], None] | None = None
        """Set to lose the next reply: the proxy drops it, calls this and cuts the link."""
        self.lost: list[wire.Response] = []
        self._links: set[anyio.CancelScope] = set()

    def cut(self) -> None:
        for link in list(self._links):
            link.cancel()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_unix_listener(self.path)
        task_status.started()
        await listener.serve(self._link)

    async def _link(self, client: ByteStream) -> None:
        async with client:
            if self.refusing:
                return
            try:
                daemon = await anyio.connect_unix(self.upstream)
            except OSError:
                return
            async with daemon, anyio.create_task_group() as tg:
                self._links.add(tg.cancel_scope)
                tg.start_soon(self._requests, client, daemon, tg)
                await self._replies(daemon, client, tg)
            self._links.discard(tg.cancel_scope)

    async def _requests(self, client: ByteStream, daemon: ByteStream, tg: TaskGroup) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in client:
                await daemon.send(chunk)
        tg.cancel_scope.cancel()

    async def _replies(self, daemon: ByteStream, client: ByteStream, tg: TaskGroup) -> None:
        decoder = wire.Decoder()
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in daemon:
                for message in decoder.feed(chunk):
                    assert not isinstance(message, wire.WireError)
                    if isinstance(message, wire.Response) and self.on_lost_reply is not None:
                        lose, self.on_lost_reply = self.on_lost_reply, None
                        self.lost.append(message)
                        lose()
                        tg.cancel_scope.cancel()
                        return
                    await client.send(wire.pack(message))
        tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def _proxied(daemon: Daemon) -> AsyncIterator[tuple[LossyProxy, TaskGroup]]:
    proxy = LossyProxy(daemon.root / "proxy.sock", daemon.socket)
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        yield proxy, tg
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_command_whose_reply_was_lost_is_sent_again_with_its_request_id_and_applied_once(
    daemon: Daemon,
) -> None:
    async with (
        _proxied(daemon) as (proxy, tg),
        AsyncClient.unix(proxy.path, reconnect_timeout=WAIT) as client,
    ):
        seq = await _bank(client)
        async with client.subscribe("bank", after=0) as events:
            before = await _until(events, {"bank": seq})

            def kill_and_restart() -> None:
                daemon.kill()  # the command is durable: its reply was on its way
                tg.start_soon(anyio.to_thread.run_sync, daemon.start)

            proxy.on_lost_reply = kill_and_restart
            webbed = await client.apply_condition("bank", target="ock", type="custom")
            assert [reply.result for reply in proxy.lost] == [webbed]
            later = await client.end_turn("bank", turn=TurnRef(1, "spidey"))
            after = await _until(events, {"bank": later["seq"]})
        history = await client.history("bank", after=0, limit=1000)
    applied = [e for e in history["events"] if e.get("command") == "apply_condition"]
    assert len(applied) == 1
    assert _seqs(before + after, "bank") == list(range(1, later["seq"] + 1))


@pytest.mark.anyio
async def test_a_table_method_whose_reply_was_lost_is_not_sent_again(daemon: Daemon) -> None:
    """``create_table`` and ``add_token`` take no request id: sent again, they would make a
    second table or token. Their lost answer fails the call; the client itself goes on."""
    async with (
        _proxied(daemon) as (proxy, _),
        AsyncClient.unix(proxy.path, reconnect_timeout=WAIT) as client,
    ):
        proxy.on_lost_reply = lambda: None
        with pytest.raises(ConnectionLost, match="create_table: the connection dropped"):
            await client.create_table("Lost answer")
        made = [t for t in await client.list_tables() if t["name"] == "Lost answer"]
        assert len(made) == 1
        table = made[0]["table"]
        proxy.on_lost_reply = lambda: None
        with pytest.raises(ConnectionLost, match="add_token: the connection dropped"):
            await client.add_token(table, "observer")
        assert len(await client.list_tokens(table)) == 1
        # A table method that only reads is sent again as any query is.
        assert len(proxy.lost) == 2
        proxy.on_lost_reply = lambda: None
        assert await client.list_tokens(table) == await client.list_tokens(table)
        assert len(proxy.lost) == 3


@pytest.mark.anyio
async def test_subscriptions_fill_the_gap_of_a_reconnect_per_combat_and_for_all(
    daemon: Daemon,
) -> None:
    async with (
        _proxied(daemon) as (proxy, _),
        AsyncClient.unix(proxy.path, reconnect_timeout=WAIT) as client,
    ):
        seq = await _bank(client)
        async with (
            client.subscribe_all() as everything,
            client.subscribe("bank", after=seq) as bank,
        ):
            assert everything.result == {"seqs": {"bank": seq}, "until": "bank", "more": False}
            await client.end_turn("bank", turn=TurnRef(1, "spidey"))
            # Cut off while the table plays on: a turn ends and a new combat opens.
            proxy.refusing = True
            proxy.cut()
            other = await anyio.to_thread.run_sync(daemon.client)
            ock = {"round": 1, "combatant": "ock"}
            other.call("end_turn", request_id="e1", combat="bank", turn=ock)
            other.call("create_combat", request_id="v1", combat_id="vault", ruleset="dnd3e")
            proxy.refusing = False
            last = await client.hold("bank", turn=TurnRef(2, "spidey"))
            seen_all = await _until(everything, {"bank": last["seq"], "vault": 2})
            seen_bank = await _until(bank, {"bank": last["seq"]})
    assert _seqs(seen_all, "bank") == list(range(seq + 1, last["seq"] + 1))
    assert _seqs(seen_all, "vault") == [1, 2]
    assert _seqs(seen_bank, "bank") == list(range(seq + 1, last["seq"] + 1))


@pytest.mark.anyio
async def test_subscribe_all_fills_the_gap_of_a_reconnect_beyond_the_first_page(
    daemon: Daemon,
) -> None:
    """With more combats than the daemon names in one answer, the gap of a combat sorting
    after the first page is filled from history too."""
    ids = [f"c{i:04d}" for i in range(MAX_COMBAT_PAGE + 2)]
    create_many(await anyio.to_thread.run_sync(daemon.client), ids)
    last = ids[-1]
    async with (
        _proxied(daemon) as (proxy, _),
        AsyncClient.unix(proxy.path, reconnect_timeout=WAIT) as client,
        client.subscribe_all() as everything,
    ):
        assert everything.result["seqs"] == dict.fromkeys(ids, 2)
        proxy.refusing = True
        proxy.cut()
        other = await anyio.to_thread.run_sync(daemon.client)
        other.call("add_combatant", request_id="a1", combat=last, id="x", display_name="X")
        proxy.refusing = False
        done = await client.add_combatant(last, id="y", display_name="Y")
        seen = await _until(everything, {last: done["seq"]})
    assert _seqs(seen, last) == list(range(3, done["seq"] + 1))


@pytest.mark.anyio
async def test_waiters_get_connection_lost_when_the_daemon_stays_down(daemon: Daemon) -> None:
    async with AsyncClient.unix(daemon.socket, reconnect_timeout=0.5) as client:
        await _bank(client)
        async with client.subscribe("bank", after=12) as events:
            daemon.kill()
            with anyio.fail_after(WAIT):
                with pytest.raises(ConnectionLost) as lost:
                    await client.end_turn("bank", turn=TurnRef(1, "spidey"), request_id="end-1")
                assert lost.value.request_id == "end-1"
                with pytest.raises(ConnectionLost):
                    await events.__anext__()
                with pytest.raises(ConnectionLost):
                    await client.list_combats()


@pytest.mark.anyio
async def test_tcp_needs_a_token_at_hello(tmp_path: Path) -> None:
    with running(tmp_path, True) as d:
        assert d.tcp_port is not None
        secret = d.token("observer")
        with pytest.raises(CallError) as refused:
            async with AsyncClient.tcp("127.0.0.1", d.tcp_port):
                pass
        assert (refused.value.code, refused.value.field) == ("unauthenticated", "token")
        async with AsyncClient.tcp("127.0.0.1", d.tcp_port, token=secret) as client:
            assert client.session["role"] == "observer"
            assert await client.list_combats() == []
