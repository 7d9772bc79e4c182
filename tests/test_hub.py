"""The hub on a real SQLite store, in process: limits that an end-to-end test cannot reach
quickly."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
import pytest

from daemon import CALL_TIMEOUT
from story import OBSERVER, Story, player
from turnkeeper.combats import Hub, RequestError, deadlines, listing, registry, writer
from turnkeeper.combats import hub as facade
from turnkeeper.combats.telling import Batch, numbered_packed, packed, packed_rows
from turnkeeper.combats.telling import numbered as shown_to
from turnkeeper.store import DB_FILE, Store
from turnkeeper_engine import BUNDLED_RULES, NARRATOR, State
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.errors import ProtocolError
from turnkeeper_engine.model import TriggerFacts, TurnRef
from turnkeeper_engine.plain import command_from_plain, event_to_plain, from_shared, to_shared
from turnkeeper_sdk import wire


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_daemon_holds_at_most_max_combats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "MAX_COMBATS", 2)
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for n in range(2):
            await hub.execute("p", NARRATOR, f"c{n}", c.CreateCombat(f"c{n}", "marvel"), f"r{n}")
        with pytest.raises(RequestError) as refused:
            await hub.execute("p", NARRATOR, "c2", c.CreateCombat("c2", "marvel"), "r2")
        assert (refused.value.code, refused.value.field) == ("too_many_combats", "combat_id")
        assert sorted(hub.combats) == ["c0", "c1"]
        await store.stop()
    store.close()


@pytest.mark.anyio
async def test_combats_created_at_once_share_a_transaction(tmp_path: Path) -> None:
    """Creating a combat holds its id and its room, not every other creation: combats created
    at the same time are committed together, as other commands are."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        before = store.transactions
        async with anyio.create_task_group() as creators:
            for n in range(5):
                creators.start_soon(
                    hub.execute, "p", NARRATOR, f"c{n}", c.CreateCombat(f"c{n}", "marvel"), f"r{n}"
                )
        assert sorted(hub.combats) == [f"c{n}" for n in range(5)]
        assert store.transactions - before < 5
        await store.stop()
    store.close()


@pytest.mark.anyio
async def test_a_creation_waits_for_one_of_the_same_id_or_for_the_last_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two creations of one id at once: one is refused as existing once the other is
    committed. With one room left, a creation of another id learns the outcome of the one
    judged before it: refused when that one took the room. Which of two concurrent requests
    is judged first is not promised (before the first commit, each looks its request id up
    in a worker thread), only that exactly one wins."""
    monkeypatch.setattr(registry, "MAX_COMBATS", 2)
    store = Store.open(tmp_path)
    hub = Hub(store)
    refusals: dict[str, str] = {}

    async def create(combat_id: str, request_id: str) -> None:
        try:
            await hub.execute(
                "p", NARRATOR, combat_id, c.CreateCombat(combat_id, "marvel"), request_id
            )
        except RequestError as e:
            refusals[request_id] = e.code

    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        async with anyio.create_task_group() as creators:
            creators.start_soon(create, "a", "r1")
            creators.start_soon(create, "a", "r2")
        assert list(refusals.values()) == ["combat_exists"]
        refusals.clear()
        async with anyio.create_task_group() as creators:
            creators.start_soon(create, "b", "r3")
            creators.start_soon(create, "c", "r4")
        ((refused, code),) = refusals.items()
        assert code == "too_many_combats"
        loser = {"r3": "b", "r4": "c"}[refused]
        assert sorted(hub.combats) == sorted({"a", "b", "c"} - {loser})
        await store.stop()
    store.close()


@pytest.mark.anyio
async def test_a_quarantined_combats_row_shows_its_reason_cut_short(tmp_path: Path) -> None:
    """A page of combats has a bounded size: a quarantine reason (an exception's text, of any
    length) is cut to MAX_REASON_CHARS in its row; the daemon's log has it whole."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "bad", c.CreateCombat("bad", "marvel"), "r")
        hub.combats["bad"].quarantined = "x" * (listing.MAX_REASON_CHARS * 10)
        cut = "x" * listing.MAX_REASON_CHARS
        assert await hub.summaries() == [{"combat": "bad", "quarantined": cut}]
        await store.stop()
    store.close()


@pytest.mark.anyio
async def test_r16_a_snapshot_that_miscounts_its_log_is_passed_over(tmp_path: Path) -> None:
    """The state tells what was hidden at which seq (R16): a snapshot whose state does not count
    the events before it (one written before states counted them, say) would judge events by
    the wrong moment, and leak what was hidden. The combat is rebuilt from its whole log, as
    from any unreadable snapshot, so an upgraded daemon keeps serving it."""
    store = Store.open(tmp_path)
    hub = Hub(store, snapshot_every=2)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "k", c.CreateCombat("k", "marvel"), "r1")
        add = c.AddCombatant("lurker", "Lurker", hidden=True)
        await hub.execute("p", NARRATOR, "k", add, "r2")
        state = hub.combats["k"].state
        await store.stop()
    store.close()
    assert (state.seq, len(state.secrets)) == (4, 1)
    miscounted = msgpack.packb(
        to_shared(dataclasses.replace(state, seq=0, secrets=())), use_bin_type=True
    )
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute("UPDATE snapshots SET body = ? WHERE combat_id = 'k'", (miscounted,))
    db.close()
    again = Hub(Store.open(tmp_path))
    async with anyio.create_task_group() as tg:
        await tg.start(again.store.run)
        await again.recover()
        rebuilt = (await again.combat("k")).state
        await again.store.stop()
    again.store.close()
    assert (rebuilt.seq, rebuilt.secrets) == (state.seq, state.secrets)
    # The replay is paid once: a snapshot of the log's end replaces the miscounting one.
    [(seq, body)] = _snapshots(tmp_path)
    assert (seq, from_shared(State, body)) == (state.seq, state)


@pytest.mark.anyio
async def test_r15_a_snapshot_an_older_daemon_stored_with_its_undo_states_is_used(
    tmp_path: Path,
) -> None:
    """A snapshot an older daemon stored, with the prior states it kept for undo, is loaded
    rather than passed over (no replay, no fresh snapshot), and undo reaches as far back."""
    old = json.loads((Path(__file__).parent / "data" / "old_undo_snapshot.json").read_text())
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for n, plain in enumerate(old["commands"]):
            await hub.execute("p", NARRATOR, "old", command_from_plain(plain), f"r{n}")
        assert hub.combats["old"].seq == old["seq"]
        await store.stop()
    store.close()
    with closing(sqlite3.connect(tmp_path / DB_FILE)) as db, db:
        db.execute(
            "INSERT OR REPLACE INTO snapshots (combat_id, seq, body) VALUES ('old', ?, ?)",
            (old["seq"], msgpack.packb(old["snapshot"], use_bin_type=True)),
        )
    again = Hub(Store.open(tmp_path))
    async with anyio.create_task_group() as tg:
        await tg.start(again.store.run)
        await again.recover()
        rebuilt = (await again.combat("old")).state
        assert rebuilt == from_shared(State, old["snapshot"])
        assert rebuilt.undo.reach == 10
        assert _snapshots(tmp_path) == [(old["seq"], old["snapshot"])]
        for n in range(10):
            await again.execute("p", NARRATOR, "old", c.Undo(), f"u{n}")
        with pytest.raises(ProtocolError) as refused:
            await again.execute("p", NARRATOR, "old", c.Undo(), "u10")
        assert refused.value.code == "nothing_to_undo"
        assert (await again.combat("old")).state.phase == "setup"
        await again.store.stop()
    again.store.close()


def _snapshots(data_dir: Path) -> list[tuple[int, Any]]:
    with closing(sqlite3.connect(data_dir / DB_FILE)) as db:
        rows = db.execute("SELECT seq, body FROM snapshots").fetchall()
    return [(seq, msgpack.unpackb(body, raw=False)) for seq, body in rows]


@pytest.mark.anyio
async def test_combats_played_in_step_take_their_snapshots_at_different_moments(
    tmp_path: Path,
) -> None:
    """A combat's first snapshot comes after between half and all of ``snapshot_every``
    events, by its id, so that combats made together and played at one pace do not all
    snapshot in one transaction, every time."""
    every = 40
    store = Store.open(tmp_path)
    hub = Hub(store, snapshot_every=every)
    ids = [f"c{i}" for i in range(6)]
    firsts: dict[str, int] = {}
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for combat in ids:
            await hub.execute("p", NARRATOR, combat, c.CreateCombat(combat, "marvel"), combat)
            await hub.execute("p", NARRATOR, combat, c.AddCombatant("k", "K"), f"{combat}-k")
        for n in range(every // 2 + 2):
            for combat in ids:
                await hub.execute(
                    "p", NARRATOR, combat, c.ApplyCondition("k", "custom"), f"{combat}-{n}"
                )
                snapshot_seq = hub.combats[combat].snapshot_seq
                if snapshot_seq and combat not in firsts:
                    firsts[combat] = snapshot_seq
        await store.stop()
    store.close()
    assert set(firsts) == set(ids)
    assert all(every // 2 <= seq <= every + 1 for seq in firsts.values()), firsts
    assert len(set(firsts.values())) > 1, firsts


@pytest.mark.anyio
async def test_a_combat_is_rebuilt_once_for_all_who_need_it_and_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command, a read and a subscription that arrive while a combat is being rebuilt all
    wait for that one rebuild; meanwhile the loop serves the combats already rebuilt."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for combat in ("slow", "ready"):
            await hub.execute("p", NARRATOR, combat, c.CreateCombat(combat, "marvel"), combat)
        created = hub.combats["ready"].seq
        await store.stop()
    store.close()

    again = Hub(Store.open(tmp_path))
    release = threading.Event()
    rebuilds: list[str] = []
    replay = again.store.replay

    def held(combat_id: str, after: int) -> Any:
        rebuilds.append(combat_id)
        if combat_id == "slow":
            release.wait(CALL_TIMEOUT)
        return replay(combat_id, after)

    monkeypatch.setattr(again.store, "replay", held)
    add = c.AddCombatant("k", "K")
    answers: list[Any] = []
    async with anyio.create_task_group() as tg:
        await tg.start(again.store.run)
        await again.recover()

        async def need(job: Any) -> None:
            answers.append(await job)

        with anyio.fail_after(CALL_TIMEOUT):
            tg.start_soon(need, again.view("slow", NARRATOR))
            tg.start_soon(need, again.execute("p", NARRATOR, "slow", add, "add"))
            tg.start_soon(need, again.history("slow", NARRATOR, 0, 10))
            while rebuilds != ["slow"]:
                await anyio.sleep(0.01)
            # The rebuild of "slow" is held in its thread: the loop still answers for "ready".
            assert msgpack.unpackb(await again.view("ready", NARRATOR))["seq"] == created
            assert answers == []
            release.set()
            while len(answers) < 3:
                await anyio.sleep(0.01)
        await again.store.stop()
    again.store.close()
    assert rebuilds == ["slow", "ready"]
    assert again.combats["slow"].seq > created  # the command ran, on the rebuilt state


@pytest.mark.anyio
async def test_r13_the_clock_ticks_other_combats_while_one_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart, a combat whose deadline passed is rebuilt before it ticks; a long
    rebuild (an upgrade's replay) holds back no other combat's deadline meanwhile."""
    timed = (("turn_time_limit", 1.0), ("turn_warning", 0.0))
    store = Store.open(tmp_path)
    hub = Hub(store, clock=lambda: 1000.0)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for combat in ("held", "free"):
            create = c.CreateCombat(combat, "marvel", options=timed)
            await hub.execute("p", NARRATOR, combat, create, f"{combat}-create")
            await hub.execute("p", NARRATOR, combat, c.AddCombatant("k", "K"), f"{combat}-add")
            await hub.execute("p", NARRATOR, combat, c.StartCombat(), f"{combat}-start")
        started = hub.combats["free"].seq
        await store.stop()
    store.close()

    again = Hub(Store.open(tmp_path), clock=lambda: 2000.0)  # both turns' time is up
    release = threading.Event()
    replay = again.store.replay

    def held(combat_id: str, after: int) -> Any:
        if combat_id == "held":
            release.wait(CALL_TIMEOUT)
        return replay(combat_id, after)

    monkeypatch.setattr(again.store, "replay", held)
    async with anyio.create_task_group() as tg:
        await tg.start(again.store.run)
        await again.recover()
        tg.start_soon(again.run_clock)
        with anyio.fail_after(CALL_TIMEOUT):
            while again.combats["free"].seq == started:
                await anyio.sleep(0.01)
            assert not again.combats["held"].loaded
            release.set()
            while again.combats["held"].seq == started:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    await again.store.stop()
    again.store.close()


def test_r16_a_line_never_borrows_the_name_of_a_combatant_hidden_now() -> None:
    """Visibility is judged by what was hidden when an event happened, and so are the names a
    narrated line lends (R16): a visible combatant's roll, undone, whose id a hidden one then
    takes, is told with the id, never the hidden one's name."""
    s = Story("marvel")
    s.add("v", "Vera")
    s.roll("v", 4, 4, 4)
    s.do(c.Undo())
    s.do(c.Undo())
    s.add("v", "Assassin", hidden=True)
    numbered = list(enumerate(s.log, start=1))
    rolled = [i for i, e in numbered if isinstance(e, ev.InitiativeRolled)]
    for actor in (OBSERVER, player("u2")):
        lines = {
            item["seq"]: item["summary"]
            for item in shown_to(numbered, s.state, actor, locale="en", rules=BUNDLED_RULES)
        }
        assert "Assassin" not in " ".join(str(text) for text in lines.values())
        assert rolled[0] in lines


class _Now:
    """A clock the test moves by hand."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def _started(hub: Hub, combat: str, **options: float) -> None:
    """a (18) then b (6), marvel, started at the hub's time."""
    create = c.CreateCombat(combat, "marvel", options=tuple(options.items()))
    await hub.execute("p", NARRATOR, combat, create, f"{combat}-create")
    for who, faces in (("a", (6, 6, 6)), ("b", (2, 2, 2))):
        await hub.execute("p", NARRATOR, combat, c.AddCombatant(who, who), f"{combat}-{who}")
        roll = c.RollInitiative(who, faces=faces)
        await hub.execute("p", NARRATOR, combat, roll, f"{combat}-roll-{who}")
    await hub.execute("p", NARRATOR, combat, c.StartCombat(), f"{combat}-start")


async def _until_changed(hub: Hub, combat: str, seq: int) -> None:
    with anyio.fail_after(CALL_TIMEOUT):
        while hub.combats[combat].seq == seq:
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_r13_the_clock_follows_a_deadline_that_moves_later_or_disappears(
    tmp_path: Path,
) -> None:
    """The clock's heap holds each combat at the deadline its last command left: a turn ended
    early is ticked at the next turn's deadline, an ended combat never."""
    now = _Now(1000.0)
    store = Store.open(tmp_path)
    hub = Hub(store, clock=now)
    timed = {"turn_time_limit": 1.0, "turn_warning": 0.0}
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for combat in ("due", "later", "gone"):
            await _started(hub, combat, **timed)  # each turn's deadline: 1001.0
        tg.start_soon(hub.run_clock)
        now.t = 1000.5
        end = c.EndTurn(TurnRef(1, "a"))
        await hub.execute("p", NARRATOR, "later", end, "later-end")  # b's turn: until 1001.5
        await hub.execute("p", NARRATOR, "gone", c.EndCombat(), "gone-end")
        seqs = {combat: hub.combats[combat].seq for combat in hub.combats}
        now.t = 1001.2
        await _until_changed(hub, "due", seqs["due"])
        await anyio.wait_all_tasks_blocked()  # the clock asleep again: its pass is over
        assert hub.combats["later"].seq == seqs["later"]
        now.t = 1001.6
        await _until_changed(hub, "later", seqs["later"])
        await anyio.wait_all_tasks_blocked()
        assert hub.combats["gone"].seq == seqs["gone"]
        tg.cancel_scope.cancel()
    store.close()


@pytest.mark.anyio
async def test_r13_a_deadline_sooner_than_the_clock_sleeps_until_wakes_it(tmp_path: Path) -> None:
    """The clock sleeps until the soonest deadline on its heap; a command that brings one
    sooner (a window of 1 s opened in a turn of a day) wakes it."""
    now = _Now(1000.0)
    store = Store.open(tmp_path)
    hub = Hub(store, clock=now)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await _started(hub, "k", turn_time_limit=86400.0, window_deadline=1.0)
        tg.start_soon(hub.run_clock)
        await anyio.wait_all_tasks_blocked()  # asleep until the turn's end, a day away
        announce = c.AnnounceTrigger(TriggerFacts("announced", "b"))
        await hub.execute("p", NARRATOR, "k", announce, "k-announce")
        assert hub.combats["k"].state.window is not None
        now.t = 1001.5
        with anyio.fail_after(CALL_TIMEOUT):
            while hub.combats["k"].state.window is not None:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    store.close()


@pytest.mark.anyio
async def test_the_clocks_heap_stays_bounded_however_often_a_deadline_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each move leaves an outdated entry behind; past one per combat and the slack, the heap
    is rebuilt from the live entries."""
    monkeypatch.setattr(deadlines, "CLOCK_HEAP_SLACK", 4)
    now = _Now(1000.0)
    store = Store.open(tmp_path)
    hub = Hub(store, clock=now)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await _started(hub, "k", turn_time_limit=60.0)
        for n in range(30):
            now.t += 1.0
            turn = hub.combats["k"].state.turn
            assert turn is not None
            end = c.EndTurn(TurnRef(turn.round, turn.combatant))
            await hub.execute("p", NARRATOR, "k", end, f"end-{n}")
            assert len(hub.deadlines.entries) <= 2 * len(hub.combats) + 4
        await store.stop()
    store.close()


class _Follower:
    """A subscriber that keeps what it is sent."""

    actor = NARRATOR
    narration: str | None = None

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def deliver(self, batch: Batch) -> bool:
        self.sent.extend(batch.messages)
        return True

    def room(self) -> int:
        return 1000

    def lost(self) -> None:
        raise AssertionError("its events are always told")


@pytest.mark.anyio
async def test_unsubscribing_leaves_the_combats_followed_and_no_other(tmp_path: Path) -> None:
    """A disconnect ends the subscriber's subscriptions, whatever number of combats the
    daemon holds; another subscriber of the same combat keeps its own."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    one, other = _Follower(), _Follower()
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for n in range(40):
            await hub.execute("p", NARRATOR, f"c{n}", c.CreateCombat(f"c{n}", "marvel"), f"r{n}")
        for combat in ("c3", "c7"):
            await hub.subscribe(combat, one, hub.combats[combat].seq)
        await hub.subscribe("c3", other, hub.combats["c3"].seq)
        hub.unsubscribe(one, "c3")
        subscriptions = hub.subscriptions
        assert subscriptions.subscribers("c3") == {other}
        assert subscriptions.subscribers("c7") == {one}
        hub.unsubscribe(one, "nowhere")  # not followed: nothing to do
        hub.forget(one)
        assert not any(subscriptions.follows(one, combat) for combat in hub.combats)
        assert subscriptions.subscribers("c3") == {other}
        await hub.execute("p", NARRATOR, "c7", c.AddCombatant("k", "K"), "add")
        assert one.sent == []
        await hub.execute("p", NARRATOR, "c3", c.AddCombatant("k", "K"), "add-3")
        assert other.sent != []
        await store.stop()
    store.close()


class _Batched(_Follower):
    """A subscriber that keeps the batches it is handed, as they are."""

    def __init__(self, actor: Any = NARRATOR, narration: str | None = None) -> None:
        super().__init__()
        self.actor = actor
        self.narration = narration
        self.batches: list[Batch] = []

    def deliver(self, batch: Batch) -> bool:
        self.batches.append(batch)
        return True


@pytest.mark.anyio
async def test_r16_an_audience_shares_one_batch_per_command_and_sees_only_its_own(
    tmp_path: Path,
) -> None:
    """A command's events are packed once per audience (role, user, locale): its subscribers,
    whether they follow the combat or every combat, are handed that one batch, and another
    audience's never; a hidden combatant's events reach no player's batch (R16)."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    gms = [_Batched(), _Batched()]
    told = _Batched(narration="en")
    players = [_Batched(player("u1")), _Batched(player("u1"))]
    everywhere = _Batched()
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "k", c.CreateCombat("k", "marvel"), "create")
        for follower in [*gms, told, *players]:
            await hub.subscribe("k", follower, hub.combats["k"].seq)
        await hub.subscribe_all(everywhere)
        hidden = c.AddCombatant("spy", "Spy", hidden=True)
        await hub.execute("p", NARRATOR, "k", hidden, "hide")
        await hub.execute("p", NARRATOR, "k", c.AddCombatant("ann", "Ann"), "add")
        first, second = gms[0].batches, gms[1].batches
        assert len(first) == 2
        assert [a is b for a, b in zip(first, second, strict=True)] == [True, True]
        assert [a is b for a, b in zip(first, everywhere.batches, strict=True)] == [True, True]
        assert not any(a is b for a in first for b in told.batches)
        # The hidden combatant's arrival is no player's: only that a command was recorded.
        mine, theirs = players[0].batches, players[1].batches
        assert [a is b for a, b in zip(mine, theirs, strict=True)] == [True, True]
        assert not any(a is b for a in mine for b in first)

        def kinds(batch: Batch) -> list[str]:
            return [msgpack.unpackb(m)[2][0]["event"] for m in batch.messages]

        assert kinds(first[0]) == ["command_recorded", "combatant_added"]
        assert kinds(mine[0]) == ["command_recorded"]
        assert kinds(mine[1]) == kinds(first[1])
        await store.stop()
    store.close()


class _Leaving(_Batched):
    """A subscriber that leaves every subscription as it is handed a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.hub: Hub | None = None

    def deliver(self, batch: Batch) -> bool:
        super().deliver(batch)
        assert self.hub is not None
        self.hub.forget(self)
        return True


@pytest.mark.anyio
async def test_a_subscriber_that_leaves_as_it_is_handed_its_batch_cuts_no_one_else_off(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path)
    hub = Hub(store)
    leaving = [_Leaving(), _Leaving()]
    others = [_Batched(player("u1")), _Batched()]
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "k", c.CreateCombat("k", "marvel"), "create")
        for follower in leaving:
            follower.hub = hub
            await hub.subscribe("k", follower, hub.combats["k"].seq)
            await hub.subscribe_all(follower)
        for follower in others:
            await hub.subscribe("k", follower, hub.combats["k"].seq)
            await hub.subscribe_all(follower)
        await hub.execute("p", NARRATOR, "k", c.AddCombatant("ann", "Ann"), "add")
        assert [len(f.batches) for f in others] == [2, 2]
        assert len(leaving[0].batches) + len(leaving[1].batches) >= 2
        await store.stop()
    store.close()


class _Stalled(_Follower):
    """A subscriber whose outbox is full once it has caught up."""

    def deliver(self, batch: Batch) -> bool:
        return False


@pytest.mark.anyio
async def test_a_subscriber_that_cannot_keep_up_loses_its_record_and_may_subscribe_again(
    tmp_path: Path,
) -> None:
    """The registry is the one record of a subscription: a subscriber that cannot take an
    event (its session then ends itself with ``slow_consumer``) is dropped from it, from
    ``subscribe_all`` too, so nothing is left to refuse a new subscribe as a duplicate."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    stalled = _Stalled()
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "k", c.CreateCombat("k", "marvel"), "create")
        await hub.subscribe("k", stalled, hub.combats["k"].seq)
        await hub.subscribe_all(stalled)
        with pytest.raises(RequestError) as twice:
            await hub.subscribe("k", stalled, hub.combats["k"].seq)
        assert twice.value.code == "already_subscribed"
        await hub.execute("p", NARRATOR, "k", c.AddCombatant("a", "A"), "add")
        assert not hub.subscriptions.follows(stalled, "k")
        assert not hub.subscriptions.follows_all(stalled)
        assert await hub.subscribe("k", stalled, hub.combats["k"].seq) == hub.combats["k"].seq
        await store.stop()
    store.close()


@pytest.mark.anyio
async def test_a_retry_sent_while_the_first_is_still_looked_up_gets_the_first_answer(
    tmp_path: Path,
) -> None:
    """After a restart a request id is looked up in the database, in a worker thread: the
    same request sent twice meanwhile runs once, and both get its answer."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "k", c.CreateCombat("k", "marvel"), "create")
        await store.stop()
    store.close()

    again = Hub(Store.open(tmp_path))
    answers: list[Any] = []

    async def add() -> None:
        answers.append(await again.execute("p", NARRATOR, "k", c.AddCombatant("x", "X"), "add"))

    async with anyio.create_task_group() as tg:
        await tg.start(again.store.run)
        await again.recover()
        seq = again.combats["k"].seq
        async with anyio.create_task_group() as both:
            both.start_soon(add)
            both.start_soon(add)
        await again.store.stop()
    again.store.close()
    assert answers[0] == answers[1]
    assert answers[0]["seq"] == again.combats["k"].seq > seq
    assert len(again.combats["k"].state.combatants) == 1


def _fields_shown(tp: Any, seen: set[Any]) -> list[str]:
    """Every field of a dataclass and of the dataclasses its fields hold, that ``repr`` leaves
    out."""
    import typing

    hidden: list[str] = []
    if tp in seen or not dataclasses.is_dataclass(tp):
        return hidden
    seen.add(tp)
    hints = typing.get_type_hints(tp)
    for f in dataclasses.fields(tp):
        if not f.repr:
            hidden.append(f"{tp.__name__}.{f.name}")
        stack = [hints[f.name]]
        while stack:
            hint = stack.pop()
            stack.extend(typing.get_args(hint))
            if isinstance(hint, type):
                hidden += _fields_shown(hint, seen)
    return hidden


def test_a_request_fingerprint_stands_for_every_field_of_every_command() -> None:
    """The fingerprint reads every field of a command and of the values nested in it, and
    ``fingerprint_v2`` (still recognised) digested a command's repr: one that left a field out
    would let a reused request id with another command pass as a retry."""
    seen: set[Any] = set()
    assert [h for command in c.COMMANDS.values() for h in _fields_shown(command, seen)] == []
    for fingerprint in (writer.fingerprint, writer.fingerprint_v2):
        one = fingerprint("k", NARRATOR, c.AddCombatant("a", "A", tags=("x",)))
        other = fingerprint("k", NARRATOR, c.AddCombatant("a", "A", tags=("y",)))
        assert one != other
    turn = TurnRef(round=1, combatant="a")
    later = dataclasses.replace(turn, round=2)
    assert writer.fingerprint("k", NARRATOR, c.Hold(turn)) != writer.fingerprint(
        "k", NARRATOR, c.Hold(later)
    )
    # A class with one field, and one with none: the class's name tells them apart.
    undo = writer.fingerprint("k", NARRATOR, c.Undo())
    assert undo != writer.fingerprint("k", NARRATOR, c.EndTurn(turn))
    assert len(undo) == 2 * writer.FINGERPRINT_BYTES


@pytest.mark.anyio
@pytest.mark.parametrize("older", ["fingerprint_v1", "fingerprint_v2"])
async def test_a_retry_an_older_daemon_remembered_is_answered_after_an_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, older: str
) -> None:
    """Requests stored with the fingerprint daemons before this one wrote are still recognised:
    a client retrying across the upgrade gets its first result back, and a different command
    under the same id is still refused."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "k", c.CreateCombat("k", "marvel"), "r1")
        add = c.AddCombatant("a", "A")
        with monkeypatch.context() as before:
            before.setattr(writer, "fingerprint", getattr(writer, older))
            first = await hub.execute("p", NARRATOR, "k", add, "r2")
        seq = hub.combats["k"].seq
        assert await hub.execute("p", NARRATOR, "k", add, "r2") == first
        assert hub.combats["k"].seq == seq
        with pytest.raises(RequestError) as reused:
            await hub.execute("p", NARRATOR, "k", c.AddCombatant("b", "B"), "r2")
        assert reused.value.code == "request_id_reused"
        await store.stop()
    store.close()


def test_a_serving_daemon_collects_its_youngest_generation_less_often() -> None:
    import gc

    default = gc.get_threshold()
    try:
        facade.tune_collector()
        assert gc.get_threshold() == (facade.GC_YOUNG, *default[1:])
    finally:
        gc.set_threshold(*default)


def _revealed() -> tuple[Story, list[tuple[int, ev.Event]], list[dict[str, Any]]]:
    """A combat with a hidden combatant revealed, its log numbered and its events' plain
    forms: events some audiences do not see, and one shown changed."""
    s = Story("marvel")
    s.add("v", "Vera")
    s.add("h", "Assassin", hidden=True)
    s.roll("v", 4, 4, 4)
    s.roll("h", 6, 6, 6)
    s.do(c.RevealCombatant("h"))
    log = list(enumerate(s.log, start=1))
    return s, log, [event_to_plain(e) for _, e in log]


def test_events_packed_once_are_the_bytes_msgpack_would_pack() -> None:
    """A command's events are packed once, as the store's rows, and the caller's view of them
    is spliced from those bytes: for every audience, hidden events and events shown changed
    included, the bytes are exactly msgpack's packing of what ``numbered`` shows."""
    s, log, plains = _revealed()
    packer = msgpack.Packer(use_bin_type=True)
    rows = [packer.pack(p) for p in plains]
    for actor in (NARRATOR, OBSERVER, player("u2")):
        expected = shown_to(log, s.state, actor, plains, rules=BUNDLED_RULES)
        shown, items = numbered_packed(log, s.state, actor, plains, rows, packer)
        assert shown == expected
        assert items == [msgpack.packb(item, use_bin_type=True) for item in expected]
    assert len(numbered_packed(log, s.state, OBSERVER, plains, rows, packer)[0]) < len(log)
    # Maps too wide for a one-byte head are packed whole, with the same bytes.
    wide = [dict(p, **{f"x{n}": n for n in range(15)}) for p in plains]
    expected = shown_to(log, s.state, NARRATOR, wide, rules=BUNDLED_RULES)
    _, items = numbered_packed(log, s.state, NARRATOR, wide, [packer.pack(p) for p in wide], packer)
    assert items == [msgpack.packb(item, use_bin_type=True) for item in expected]


def test_events_notified_from_their_rows_are_the_bytes_packed_would_make() -> None:
    """A subscriber's ``event`` notifications are made of the rows the store was given, not
    packed again: for every audience, hidden events and events shown changed included, and
    maps too wide for a one-byte head or holding a key of the notification's own, the bytes
    are exactly ``packed``'s of what ``numbered`` shows."""
    s, log, plains = _revealed()
    packer = msgpack.Packer(use_bin_type=True)
    for bodies in (
        plains,
        # 13 entries more: 15 with combat and seq, the widest one-byte head; 14: wider.
        [dict(p, **{f"x{n}": n for n in range(13 - len(p))}) for p in plains],
        [dict(p, **{f"x{n}": n for n in range(14 - len(p))}) for p in plains],
        [dict(p, combat="theirs") for p in plains],
        [dict(p, seq=-1) for p in plains],
    ):
        rows = [packer.pack(p) for p in bodies]
        for actor in (NARRATOR, OBSERVER, player("u2")):
            shown = shown_to(log, s.state, actor, bodies, rules=BUNDLED_RULES)
            expected = packed("t/k", shown).messages
            got = packed_rows("t/k", log, s.state, actor, bodies, rows, packer).messages
            assert got == expected
    rows = [packer.pack(p) for p in plains]
    assert len(packed_rows("k", log, s.state, OBSERVER, plains, rows, packer).messages) < len(log)


@pytest.mark.anyio
async def test_a_command_result_carries_the_bytes_of_its_plain_value(tmp_path: Path) -> None:
    """The reply to a command is spliced from bytes packed once: it is byte for byte the reply
    its plain value makes, and a retry is answered the same value from the remembered bytes."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "c", c.CreateCombat("c", "marvel"), "r0")
        add = c.AddCombatant("v", "Vera")
        result = await hub.execute("p", NARRATOR, "c", add, "r1")
        assert isinstance(result, wire.PackedMap)
        plain = msgpack.unpackb(msgpack.packb(dict(result), use_bin_type=True), raw=False)
        reply = wire.pack(wire.Response(7, None, result))
        assert reply == wire.pack(wire.Response(7, None, plain))
        assert await hub.execute("p", NARRATOR, "c", add, "r1") == plain
        await store.stop()
    store.close()
