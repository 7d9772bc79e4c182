"""Crash test: SIGKILL the daemon at random moments while clients write, restart it, and prove
that nothing acknowledged was lost, nothing was applied twice, and the served state is a full
replay of the log.

Every request a client sends is written in a ledger before it goes out; its outcome (the
acknowledged result, a refusal, or nothing because the daemon died) is written when known.
After each restart the ledger is checked against the daemon:

- every acknowledged result's events are in ``history`` at the same seqs;
- every event of a combat's log is claimed by exactly one request's result (nobody acts but
  these clients: no turn timers, no reaction windows), so nothing was applied twice or by a
  refused request;
- retrying a request id returns exactly the first result and moves no seq;
- a request that died in flight, retried with its id, is applied at most once: its result lies
  wholly before the restart's seq (it had committed) or wholly after it (it had not);
- ``get_combat`` serves the view a fresh fold of the whole history gives, and an ``undo`` sent
  after the restart does what it does to that fold (undo reads the undo history, which the
  daemon restores from a snapshot and no view shows).

``TURNKEEPER_CRASH_CYCLES`` sets the number of kills (50 by default, thousands for a soak);
``TURNKEEPER_CRASH_SEED`` replays one seed's choices of commands and kill moments (the
interleaving of threads and the daemon's dice stay the machine's own).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon import CallError, Client, Daemon
from turnkeeper_engine import (
    BUNDLED_RULES,
    NARRATOR,
    RuleError,
    SeededDice,
    State,
    decide,
    fold,
    to_plain,
    view,
)
from turnkeeper_engine import events as ev
from turnkeeper_engine.commands import Undo
from turnkeeper_engine.plain import event_from_plain

CRASH_CYCLES = int(os.environ.get("TURNKEEPER_CRASH_CYCLES", "50"))
"""Kills in the main scenario; the two focused scenarios run a tenth of it (at least 3)."""
CRASH_SEED = int(os.environ.get("TURNKEEPER_CRASH_SEED") or random.SystemRandom().randrange(2**32))
"""Fresh each run unless given; printed, so a failure can be replayed."""

MIXED_WORKERS = 3
"""Client threads of the main scenario: enough to contend for the same combats on two cores."""
LIVE_COMBATS = 3
"""Unfinished combats the main scenario keeps going; a finished one is replaced by a new one,
so each combat's log (checked by a full replay every cycle) stays short."""
RUN_SECONDS = (0.02, 0.35)
"""How long clients write before the kill, drawn uniformly: a few hundred ms at most keeps 50
cycles well under a minute."""
GROUP_WORKERS = 16
"""Connections committing at once in the group-commit scenario, each on its own combat: the
committer takes them in shared transactions."""
GROUP_COMBATANTS = 30
"""Combatants a group-commit worker adds to one combat before it opens the next."""
START_UP_KILL_SECONDS = (0.0, 0.3)
"""When, after spawning, the start-up scenario kills the daemon: before, during and just after
recovery (start-up takes about 0.2 s here)."""
JUST_STARTED_SECONDS = (0.0, 0.08)
"""How long clients write after start-up before the start-up scenario kills again."""
SNAPSHOT_EVERY = 8
"""Events between two snapshots of a combat (the daemon's default is 1000): small, so most
restarts recover from a snapshot plus a tail, and undo after a restart reaches into the undo
history a snapshot carried."""
HISTORY_PAGE = 1000
"""The protocol's largest ``history`` page: the fewest round trips per full replay."""
JOIN_SECONDS = 30.0
"""A worker still running this long after the kill is stuck, which is a failure."""


@dataclass
class Request:
    """One command as sent, and what became of it."""

    request_id: str
    method: str
    params: dict[str, Any]
    combat: str
    marker: str | None
    """Written into the command's first event (a display name or an action's description), so
    a double application shows as two such events."""
    cycle: int
    result: dict[str, Any] | None = None
    refused: str | None = None
    retried: bool = False
    """Sent again after a restart because its first answer never came."""

    @property
    def seqs(self) -> list[int]:
        assert self.result is not None
        return [int(e["seq"]) for e in self.result["events"]]


@dataclass
class Ledger:
    """Every request of a run, in the order sent; shared by the client threads."""

    requests: list[Request] = field(default_factory=list)
    by_combat: defaultdict[str, list[Request]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)
            self.by_combat[request.combat].append(request)

    def of_cycle(self, cycle: int) -> list[Request]:
        return [r for r in self.requests if r.cycle == cycle]

    @property
    def acknowledged(self) -> int:
        return sum(r.result is not None and not r.retried for r in self.requests)


class Worker(threading.Thread):
    """One connection writing until the daemon dies under it."""

    def __init__(self, run: Run, name: str, rng: random.Random) -> None:
        super().__init__(name=name, daemon=True)
        self.run_ = run
        self.rng = rng
        self.ids = itertools.count(1)
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            client = self.run_.daemon.client()
            try:
                while True:
                    self.step(client)
            finally:
                client.close()
        except TimeoutError as e:  # a daemon that hangs is not a daemon that died
            self.failure = e
        except (EOFError, OSError):
            return  # the kill: whatever was in flight stays unanswered in the ledger
        except BaseException as e:
            self.failure = e

    def send(self, client: Client, method: str, combat: str, **fields: Any) -> Request:
        request_id = f"{self.name}-{next(self.ids)}"
        target = {"combat_id": combat} if method == "create_combat" else {"combat": combat}
        params = {"request_id": request_id, **target, **fields}
        marker = fields.get("display_name") or fields.get("action", {}).get("description")
        request = Request(request_id, method, params, combat, marker, self.run_.cycle)
        self.run_.ledger.add(request)
        try:
            request.result = client.call(method, **params)
        except CallError as e:
            request.refused = e.code
        return request

    def step(self, client: Client) -> None:
        raise NotImplementedError


class MixedWorker(Worker):
    """Plays the shared live combats: setup, initiative, turns, actions, holds, undo, the end."""

    def step(self, client: Client) -> None:
        live = self.run_.live
        if len(live) < LIVE_COMBATS:
            combat = f"k-{self.name}-{next(self.ids)}"
            if self.send(client, "create_combat", combat, ruleset="marvel").result:
                live.append(combat)
            return
        combat = self.rng.choice(live)
        shown = client.call("get_combat", combat=combat)["view"]
        if shown["phase"] == "ended":
            with contextlib.suppress(ValueError):  # another worker saw it first
                live.remove(combat)
            return
        method, fields = self.choose(shown, f"{self.name}-{next(self.ids)}-m")
        self.send(client, method, combat, **fields)

    def choose(self, shown: dict[str, Any], marker: str) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        active = [c["id"] for c in shown["combatants"] if c["status"] == "active"]
        roll = rng.random()
        if roll < 0.06:
            return "undo", {}
        if shown["phase"] in ("none", "setup", "initiative"):
            if len(active) < 3 or roll < 0.35:
                return "add_combatant", {"id": f"x{marker}", "display_name": marker}
            if roll < 0.7:
                return "roll_initiative", {"combatant": rng.choice(active)}
            return "start_combat", {}
        turn = shown["turn"]
        held = [h["combatant"] for h in shown["holds"]]
        if turn is None or roll < 0.12:
            if held and active and roll < 0.5:
                when = rng.choice(["before", "after"])
                return "take_held_turn", {
                    "combatant": rng.choice(held),
                    "when": when,
                    "other": rng.choice(active),
                }
            if (shown["round"] or 0) >= 3 or roll < 0.02:
                return "end_combat", {}
            if turn is None:
                return "undo", {}
        assert turn is not None
        ref = {"round": turn["round"], "combatant": turn["combatant"]}
        if roll < 0.4:
            kind = rng.choice(["attack", "move", "grab", "dash"])
            return "declare_action", {"turn": ref, "action": {"kind": kind, "description": marker}}
        if roll < 0.48:
            return "hold", {"turn": ref}
        if roll < 0.52 and active:
            return "apply_condition", {"target": rng.choice(active), "type": "custom"}
        return "end_turn", {"turn": ref}


class GroupWorker(Worker):
    """Adds combatants to a combat of its own as fast as the daemon commits them."""

    def step(self, client: Client) -> None:
        combat = f"g-{self.name}-{next(self.ids)}"
        if self.send(client, "create_combat", combat, ruleset="marvel").result is None:
            return
        for _ in range(GROUP_COMBATANTS):
            marker = f"{self.name}-{next(self.ids)}-m"
            self.send(client, "add_combatant", combat, id=f"x{marker}", display_name=marker)


@dataclass
class Run:
    """One scenario: a daemon, its data directory across every restart, and the ledger."""

    daemon: Daemon
    rng: random.Random
    worker: type[Worker]
    workers: int
    ledger: Ledger = field(default_factory=Ledger)
    live: list[str] = field(default_factory=list)
    cycle: int = 0

    def write_until_killed(self, seconds: tuple[float, float]) -> None:
        threads = [
            self.worker(self, f"c{self.cycle}w{i}", random.Random(self.rng.random()))
            for i in range(self.workers)
        ]
        for t in threads:
            t.start()
        time.sleep(self.rng.uniform(*seconds))
        self.daemon.kill()
        for t in threads:
            t.join(JOIN_SECONDS)
            assert not t.is_alive(), f"{t.name} is stuck after the kill (seed {CRASH_SEED})"
            if t.failure is not None:
                raise t.failure

    def kill_while_starting(self, seconds: tuple[float, float]) -> None:
        """SIGKILL at a random moment of start-up: before, during or just after recovery."""

        def start() -> None:
            # Dying before it listens is what the kill is for.
            with contextlib.suppress(RuntimeError):
                self.daemon.start()

        self.daemon.process = None
        starter = threading.Thread(target=start, daemon=True)
        starter.start()
        while not _spawned(self.daemon):
            time.sleep(0.001)
        time.sleep(self.rng.uniform(*seconds))
        self.daemon.kill()
        starter.join(JOIN_SECONDS)
        assert not starter.is_alive(), "start() is stuck after the kill"

    def cycles(self, count: int, seconds: tuple[float, float], *, start_up: bool = False) -> None:
        self.daemon.start()
        try:
            for cycle in range(count):
                self.cycle = cycle
                if cycle:
                    if start_up:
                        self.kill_while_starting(START_UP_KILL_SECONDS)
                    self.daemon.start()
                    self.check_after_restart(self.cycle - 1)
                self.write_until_killed(seconds)
            self.daemon.start()
            self.check_after_restart(count - 1)
            self.check_everything()
            self.daemon.stop()
        finally:
            process = self.daemon.process
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    # -- checks ----------------------------------------------------------------------------------

    def check_after_restart(self, cycle: int) -> None:
        """The checks for what the cycle just killed had sent, then the live combats again."""
        client = self.daemon.client()
        sent = self.ledger.of_cycle(cycle)
        touched = {r.combat for r in sent}
        at_restart = {c: _seq(client, c) for c in touched}
        for r in sent:
            if r.result is None and r.refused is None:
                _retry_unanswered(client, r, at_restart[r.combat] or 0)
        answered = [r for r in sent if r.result is not None]
        settled = {c: _seq(client, c) for c in touched}
        for r in answered:
            _assert_same_on_retry(client, r)
        assert {c: _seq(client, c) for c in touched} == settled, "a retry applied again"
        for combat in touched:
            if settled[combat] is not None:
                replayed = self.check_combat(client, combat)
                # Undo would reopen an ended combat, and its log would grow without end.
                if replayed.phase != "ended":
                    self.probe_undo(client, combat, cycle, replayed)
        quarantined = [row for row in client.call("list_combats") if "quarantined" in row]
        assert not quarantined, f"combats quarantined after the restart: {quarantined}"
        self.live[:] = [
            row["combat"]
            for row in client.call("list_combats")
            if row["phase"] != "ended" and row["combat"].startswith("k-")
        ]
        client.close()

    def probe_undo(self, client: Client, combat: str, cycle: int, state: State) -> None:
        """Undo reaches into state no view shows (the undo history, restored from a snapshot
        after a restart): the daemon must answer it exactly as ``state``, a replay of the log,
        would. (The next check finds its events in the log like any acknowledged request's.)"""
        expected = decide(
            state, Undo(), time.time(), actor=NARRATOR, dice=SeededDice(0), rules=BUNDLED_RULES
        )
        request_id = f"probe-{cycle}-{combat}"
        params = {"request_id": request_id, "combat": combat}
        probe = Request(request_id, "undo", params, combat, None, cycle)
        self.ledger.add(probe)
        try:
            probe.result = client.call("undo", **params)
        except CallError as e:
            probe.refused = e.code
        if isinstance(expected, RuleError):
            assert probe.refused == expected.code, (
                f"{combat}: undo after the restart: {probe.refused or probe.result},"
                f" a replay says {expected.code}"
            )
        else:
            assert probe.result is not None, f"{combat}: undo refused ({probe.refused})"
            served = [(e["event"], e.get("command")) for e in probe.result["events"]]
            assert served == [(e.name, getattr(e, "command", None)) for e in expected], (
                f"{combat}: undo after the restart did not undo what a replay would"
            )
            undone = fold(_events(probe.result["events"]), state)
            shown = client.call("get_combat", combat=combat)["view"]
            assert shown == to_plain(view(undone, NARRATOR)), (
                f"{combat}: the state after undo is not the replay's"
            )

    def check_combat(self, client: Client, combat: str) -> State:
        """The log, the ledger and the served state agree, for one combat; returns the replay."""
        log = list(_history(client, combat))
        seqs = [int(e["seq"]) for e in log]
        assert seqs == list(range(1, len(log) + 1)), f"{combat}: the log has gaps: {seqs}"
        served = client.call("get_combat", combat=combat)
        assert served["seq"] == len(log), f"{combat}: served seq {served['seq']}, log {len(log)}"

        state = fold(_events(log))
        assert served["view"] == to_plain(view(state, NARRATOR)), (
            f"{combat}: the served state is not a replay of its log"
        )

        claims: Counter[int] = Counter()
        mine = self.ledger.by_combat[combat]
        for r in mine:
            if r.result is None:
                continue
            for event in r.result["events"]:
                assert log[event["seq"] - 1] == event, (
                    f"{combat}: acknowledged {r.request_id} ({r.method}) lost event {event['seq']}"
                )
            claims.update(r.seqs)
        unclaimed = sorted(set(seqs) - set(claims) - _ticks(log))
        assert not unclaimed, f"{combat}: events no acknowledged request made: {unclaimed}"
        twice = sorted(s for s, n in claims.items() if n > 1)
        assert not twice, f"{combat}: events claimed by two requests: {twice}"

        introduced = Counter(m for e in log if (m := _marker(e)) is not None)
        for r in mine:
            if r.marker is not None and (r.result is not None or r.refused is not None):
                expected = 1 if r.result is not None else 0
                assert introduced[r.marker] == expected, (
                    f"{combat}: {r.request_id} ({r.method}, {r.refused or 'acknowledged'}) "
                    f"applied {introduced[r.marker]} times"
                )
        return state

    def check_everything(self) -> None:
        """At the end: every combat replays, every acknowledged request still answers the same."""
        client = self.daemon.client()
        for row in client.call("list_combats"):
            assert "quarantined" not in row, f"quarantined at the end: {row}"
            self.check_combat(client, row["combat"])
        for r in self.ledger.requests:
            if r.result is not None:
                _assert_same_on_retry(client, r)
        client.close()


def _spawned(daemon: Daemon) -> bool:
    return daemon.process is not None


def _seq(client: Client, combat: str) -> int | None:
    try:
        return int(client.call("get_combat", combat=combat)["seq"])
    except CallError as e:
        if e.code != "unknown_combat":  # a combat that was never created is fine, nothing else
            raise AssertionError(f"{combat}: {e}") from e
        return None


def _history(client: Client, combat: str) -> Iterator[dict[str, Any]]:
    after = 0
    while True:
        page = client.call("history", combat=combat, after=after, limit=HISTORY_PAGE)
        yield from page["events"]
        if not page["events"] or page["events"][-1]["seq"] >= page["seq"]:
            return
        after = page["events"][-1]["seq"]


def _assert_same_on_retry(client: Client, r: Request) -> None:
    try:
        again = client.call(r.method, **r.params)
    except CallError as e:
        raise AssertionError(f"retried {r.request_id} ({r.method}) was refused: {e}") from e
    assert again == r.result, f"retried {r.request_id} ({r.method}) got another result"


def _events(log: Iterable[dict[str, Any]]) -> Iterator[ev.Event]:
    return (event_from_plain({k: v for k, v in e.items() if k != "seq"}) for e in log)


def _ticks(log: list[dict[str, Any]]) -> set[int]:
    """Seqs of the daemon's own clock ticks: every command's events open with its record."""
    ticks: set[int] = set()
    ticking = False
    for e in log:
        if e["event"] == "command_recorded":
            ticking = e["command"] == "tick"
        if ticking:
            ticks.add(int(e["seq"]))
    return ticks


def _marker(event: dict[str, Any]) -> str | None:
    """The marker of the request that introduced this event, if it carries one."""
    if event["event"] == "combatant_added":
        return str(event["combatant"]["name"])
    if event["event"] == "action_declared":
        return str(event["action"]["description"])
    return None


def _retry_unanswered(client: Client, r: Request, seq_at_restart: int) -> None:
    """Send an unanswered request again: it applies now or returns what it did before the kill,
    never both."""
    r.retried = True
    try:
        r.result = client.call(r.method, **r.params)
    except CallError as e:
        r.refused = e.code
        return
    seqs = r.seqs
    before = all(s <= seq_at_restart for s in seqs)
    after = all(s > seq_at_restart for s in seqs)
    assert before or after, (
        f"retried {r.request_id} straddles the restart's seq {seq_at_restart}: {seqs}"
    )


def _report(capsys: pytest.CaptureFixture[str], scenario: str, run: Run, started: float) -> None:
    retried = sum(r.retried for r in run.ledger.requests)
    with capsys.disabled():
        print(
            f"\ncrash[{scenario}]: {run.cycle + 1} kills, {run.ledger.acknowledged} acknowledged"
            f" commands, {retried} unanswered retried, seed {CRASH_SEED}"
            f" ({time.monotonic() - started:.1f} s)"
        )


def _run(tmp_path: Path, worker: type[Worker], workers: int) -> Run:
    print(f"TURNKEEPER_CRASH_SEED={CRASH_SEED}")
    daemon = Daemon(tmp_path, None, "--snapshot-every", str(SNAPSHOT_EVERY))
    return Run(daemon, random.Random(CRASH_SEED), worker, workers)


@pytest.mark.slow
def test_every_acknowledged_command_survives_sigkill_once_and_the_state_is_a_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    run = _run(tmp_path, MixedWorker, MIXED_WORKERS)
    run.cycles(CRASH_CYCLES, RUN_SECONDS)
    _report(capsys, "mixed", run, started)


@pytest.mark.slow
def test_a_kill_during_heavy_group_commit_loses_no_acknowledged_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    run = _run(tmp_path, GroupWorker, GROUP_WORKERS)
    run.cycles(max(3, CRASH_CYCLES // 10), RUN_SECONDS)
    _report(capsys, "group commit", run, started)


@pytest.mark.slow
def test_a_kill_during_or_right_after_start_up_loses_no_acknowledged_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    run = _run(tmp_path, MixedWorker, MIXED_WORKERS)
    run.cycles(max(3, CRASH_CYCLES // 10), JUST_STARTED_SECONDS, start_up=True)
    _report(capsys, "start-up", run, started)
