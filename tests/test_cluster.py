"""The cluster test (issue 12, part 4): three ``turnkeeper serve`` subprocesses on one PostgreSQL
database, clients on all three sending commands with request ids to a handful of combats, and a
chaos loop that kill -9s a random owner (restarting it) or SIGSTOPs one past its lease and
SIGCONTs it. A client whose command is refused with ``combat_moved`` or ``store_unavailable``,
or whose connection is lost, sends it again with the same request id to a random daemon; every
answered command is sometimes sent once more, to check the answer. Once the clients have
stopped, a subscriber on each daemon is to be told every combat's log to its end. Afterwards
``cluster_check`` holds what clients and subscribers were told against the log in PostgreSQL;
a client or subscriber thread that died of a failure of its own fails the test.

``TURNKEEPER_CLUSTER_CYCLES`` sets the number of chaos cycles (30 by default, each a kill or a
stop in turn); ``TURNKEEPER_CLUSTER_SEED`` replays one seed's choices of whom to kill or stop
and of commands (the threads' interleaving stays the machine's own).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import cluster_check
from cluster_check import Answer, Seen, Sent
from daemon import CallError, Client, Daemon, add_spidey, free_port, on_store, stop_all
from postgres import sql
from turnkeeper.stores.postgresql import SCHEMA

CYCLES = int(os.environ.get("TURNKEEPER_CLUSTER_CYCLES", "30"))
SEED = int(os.environ.get("TURNKEEPER_CLUSTER_SEED") or random.SystemRandom().randrange(2**32))
"""Fresh each run unless given; printed, so a failure can be replayed."""

LEASE_SECONDS = 1.0
"""Short (the default is 3 s) so that a cycle is short: a stop lasts past it, and a killed
daemon's combats wait it out."""
CYCLES_PER_FOUR_COMBATS = 30
"""A combat takes at most 500 combatants (``too_many_combatants``), removed ones included:
30 cycles add about 250 to each of four combats, so longer runs spread over more combats."""
COMBATS = 4 * -(-CYCLES // CYCLES_PER_FOUR_COMBATS)
CLIENTS_PER_DAEMON = 2
"""Client threads whose commands go first to each daemon: six threads on four combats (at 30
cycles) keep every combat moving between daemons."""
RUN_SECONDS = (0.2, 0.6)
"""How long clients write between two chaos moves, drawn uniformly."""
STOP_SECONDS = LEASE_SECONDS * 1.6
"""How long a stopped daemon stays stopped: past its lease and the others' next poll."""
GIVE_UP_SECONDS = 60.0
"""A command not answered in this long, through every retry, fails the test."""
RETRYABLE = {"combat_moved", "store_unavailable"}
"""The refusals the protocol says to retry with the same request id."""
REPEAT = 0.25
"""The share of answered commands sent once more, to a random daemon, to check the answer."""
CATCH_UP_SECONDS = 15.0
"""How long the subscribers have, once the clients have stopped, to be told every combat's log
to its end: a daemon following a combat reads it within a poll (a second) of a lost
notification, and one restarted by the last kill is subscribed to again within a moment."""


class Cluster:
    """The daemons, and what every client and subscriber was told."""

    def __init__(self, daemons: list[Daemon]) -> None:
        self.daemons = daemons
        self.sent: list[Sent] = []
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        """The chaos is over: the clients stop."""
        self.ends: dict[str, int] | None = None
        """Each combat's last seq, once the clients have stopped: the subscribers stop once
        told it."""
        self.over = threading.Event()
        """The subscribers stop, told the logs' ends or not (``CATCH_UP_SECONDS``)."""
        self.reached: dict[str, dict[str, int]] = {}
        """The last seq each subscriber (by daemon) was told of each combat."""
        self.died: list[str] = []
        """Client and subscriber threads ended by a failure of their own."""

    def name(self, d: Daemon) -> str:
        return d.root.name

    def connect(self, d: Daemon) -> Client:
        c = Client.unix(d.socket, timeout=GIVE_UP_SECONDS)
        c.hello()
        return c


def _ask(
    cluster: Cluster, sent: Sent, first: int, rng: random.Random, method: str, **params: Any
) -> None:
    """Send one command until it is answered: again with the same request id, to a random
    daemon, after a refusal to retry or a lost connection."""
    index = first
    deadline = time.monotonic() + GIVE_UP_SECONDS
    while time.monotonic() < deadline:
        d = cluster.daemons[index]
        try:
            with cluster.connect(d) as c:
                result = c.call(method, request_id=sent.request_id, **params)
            sent.answers.append(Answer(cluster.name(d), time.monotonic(), result=result))
            return
        except CallError as e:
            sent.answers.append(Answer(cluster.name(d), time.monotonic(), error=e.code))
            if e.code not in RETRYABLE:
                return
        except (OSError, EOFError):
            # Killed, restarting or stopped past the socket's timeout: another daemon.
            sent.answers.append(Answer(cluster.name(d), time.monotonic(), error=cluster_check.LOST))
        index = rng.randrange(len(cluster.daemons))


def _thread(cluster: Cluster, what: str, run: Callable[..., None], *args: Any) -> threading.Thread:
    """A client's or subscriber's thread: one that ends by raising (a refusal it does not
    expect, a failure of the test's own) is told, for the test to fail on."""

    def recorded() -> None:
        try:
            run(cluster, *args)
        except BaseException as e:
            with cluster.lock:
                cluster.died.append(f"{what} died: {e!r}")
            raise

    return threading.Thread(target=recorded, name=what)


def _client(cluster: Cluster, home: int, number: int, combats: list[str], seed: int) -> None:
    """Add a combatant, remove it, on random combats, until the chaos is over."""
    rng = random.Random(seed)
    for n in range(1_000_000):
        if cluster.done.is_set():
            return
        combat = rng.choice(combats)
        who = f"c{home}-{number}-{n}"
        commands = [
            ("add_combatant", {"combat": combat, "id": who, "display_name": who}),
            ("remove_combatant", {"combat": combat, "combatant": who}),
        ]
        for method, params in commands:
            sent = Sent(f"{who}-{method}", combat)
            with cluster.lock:
                cluster.sent.append(sent)
            _ask(cluster, sent, home, rng, method, **params)
            if not sent.results:
                break
            if rng.random() < REPEAT:
                _ask(cluster, sent, rng.randrange(len(cluster.daemons)), rng, method, **params)


def _subscriber(cluster: Cluster, home: int, combats: list[str]) -> None:
    """Follow every combat on one daemon; after a lost connection, subscribe again (to the
    same daemon, once it is back) after the last seq received, as protocol.md says to. Once
    the clients have stopped, go on until told every combat's log to its end."""
    d = cluster.daemons[home]
    last = cluster.reached[cluster.name(d)] = dict.fromkeys(combats, 0)

    def finished() -> bool:
        ends = cluster.ends
        told = ends is not None and all(last[c] >= ends.get(c, 0) for c in combats)
        return told or cluster.over.is_set()

    for connection in range(1_000_000):
        if finished():
            return
        try:
            with cluster.connect(d) as c:
                following: dict[str, Seen] = {}
                for combat in combats:
                    seen = Seen(f"{cluster.name(d)}#{connection}", combat, last[combat])
                    with cluster.lock:
                        cluster.seen.append(seen)
                    following[combat] = seen
                    _subscribe(c, combat, last[combat], finished)
                c.sock.settimeout(LEASE_SECONDS)  # to look at ``finished`` now and then
                while not finished():
                    try:
                        note = c.notification()
                    except TimeoutError:
                        continue
                    if note.method != "event":
                        continue
                    event = note.params
                    following[event["combat"]].events.append(event)
                    last[event["combat"]] = event["seq"]
        except (OSError, EOFError):
            time.sleep(0.1)


def _subscribe(c: Client, combat: str, after: int, finished: Callable[[], bool]) -> None:
    while not finished():
        try:
            c.call("subscribe", combat=combat, after=after)
            return
        except CallError as e:
            if e.code not in RETRYABLE:
                raise


def _owners(dsn: str, cluster: Cluster) -> dict[int, list[str]]:
    """The live daemons holding combats, by their index, with the combats each holds: a
    daemon is told by the TCP address it registered (a killed one's row stays behind, its
    heartbeat old)."""
    rows = sql(
        dsn,
        f"SELECT d.address, c.combat_id FROM {SCHEMA}.combats c"
        f" JOIN {SCHEMA}.daemons d ON d.daemon_id = c.owner"
        " WHERE d.heartbeat + d.lease_seconds * interval '1 second' > now()",
    )
    by_address = {f"127.0.0.1:{d.tcp_port}": i for i, d in enumerate(cluster.daemons)}
    owners: dict[int, list[str]] = {}
    for address, combat_id in rows:
        if address in by_address:
            owners.setdefault(by_address[address], []).append(combat_id)
    return owners


def _ends(dsn: str) -> dict[str, int]:
    """Each combat's last seq, as the database has it."""
    return dict(sql(dsn, f"SELECT combat_id, last_seq FROM {SCHEMA}.combats"))


@dataclass
class Move:
    """One chaos move: a daemon killed (and started again) or stopped past its lease."""

    kind: str
    daemon: str
    at: float
    held: list[str]
    """The combats it held (by the database) just before."""
    taken: list[str] = field(default_factory=list)
    """A stopped daemon's combats another daemon held when it was resumed."""

    def __str__(self) -> str:
        taken = f", {self.taken} taken meanwhile" if self.kind == "stop" else ""
        return f"at {self.at:.1f} {self.kind} {self.daemon} holding {self.held}{taken}"


def _chaos(dsn: str, cluster: Cluster, rng: random.Random) -> list[Move]:
    """Kill or stop a random owner, in turn, ``CYCLES`` times."""
    moves = []
    for cycle in range(CYCLES):
        time.sleep(rng.uniform(*RUN_SECONDS))
        owners = _owners(dsn, cluster)
        index = rng.choice(sorted(owners)) if owners else rng.randrange(len(cluster.daemons))
        d = cluster.daemons[index]
        assert d.process is not None
        assert d.process.poll() is None, f"daemon {cluster.name(d)} exited by itself"
        move = Move(
            "kill" if cycle % 2 == 0 else "stop",
            cluster.name(d),
            time.monotonic(),
            owners.get(index, []),
        )
        if move.kind == "kill":
            d.kill()
            d.start()
        else:
            d.process.send_signal(signal.SIGSTOP)
            time.sleep(STOP_SECONDS)
            still = _owners(dsn, cluster).get(index, [])
            move.taken = [c for c in move.held if c not in still]
            d.process.send_signal(signal.SIGCONT)
        moves.append(move)
    return moves


def _failovers(moves: list[Move], sent: list[Sent]) -> list[float]:
    """Per combat a killed daemon held: seconds from the kill to its next acknowledged command
    (an upper bound on the failover: it includes the wait for a client to choose it)."""
    seconds = []
    for move in moves:
        if move.kind == "kill":
            for combat in move.held:
                after = [
                    a.at for s in sent if s.combat == combat for a in s.results if a.at > move.at
                ]
                if after:
                    seconds.append(min(after) - move.at)
    return seconds


def _report(moves: list[Move], cluster: Cluster, log: cluster_check.Log) -> int:
    """Print what the run did (``-s`` shows it), for a failure's reader and the figures;
    return how many commands were acknowledged."""
    acknowledged = sum(1 for s in cluster.sent if s.results)
    events = sum(len(e) for e in log.values())
    print(f"{len(moves)} moves, {acknowledged} commands acknowledged, {events} events")
    print("\n".join(str(m) for m in moves))
    refusals = Counter(a.error for s in cluster.sent for a in s.answers if a.error is not None)
    print("answers to retry:", ", ".join(f"{n} {code}" for code, n in refusals.most_common()))
    failovers = sorted(_failovers(moves, cluster.sent))
    if failovers:
        median, worst = failovers[len(failovers) // 2], failovers[-1]
        print(f"kill to the next acknowledged command: median {median:.2f} s, max {worst:.2f} s")
    gaps = cluster_check.check_subscriptions(log, cluster.seen, contiguous=True)
    told = sum(len(s.events) for s in cluster.seen)
    print(f"{told} events to {len(cluster.seen)} subscriptions, {len(gaps)} with a gap")
    return acknowledged


@pytest.mark.slow
@pytest.mark.cluster
def test_three_daemons_under_kills_and_stops_lose_nothing_and_repeat_nothing(
    tmp_path: Path, postgres_db: str
) -> None:
    print(f"TURNKEEPER_CLUSTER_SEED={SEED}")
    rng = random.Random(SEED)
    daemons = [
        Daemon(
            tmp_path / name,
            free_port(),
            "--store",
            postgres_db,
            "--lease-seconds",
            str(LEASE_SECONDS),
        )
        for name in ("a", "b", "c")
    ]
    for d in daemons:
        d.root.mkdir()
    try:
        for d in daemons:
            d.start()
        cluster = Cluster(daemons)
        combats = [f"combat-{i}" for i in range(COMBATS)]
        for i, combat in enumerate(combats):
            sent = Sent(f"make-{combat}", combat)
            cluster.sent.append(sent)
            _ask(
                cluster,
                sent,
                i % len(daemons),
                rng,
                "create_combat",
                combat_id=combat,
                ruleset="marvel",
            )
        clients = [
            _thread(cluster, f"client {home}-{n}", _client, home, n, combats, rng.randrange(2**32))
            for home in range(len(daemons))
            for n in range(CLIENTS_PER_DAEMON)
        ]
        subscribers = [
            _thread(cluster, f"subscriber on {cluster.name(d)}", _subscriber, home, combats)
            for home, d in enumerate(daemons)
        ]
        for t in clients + subscribers:
            t.start()
        try:
            moves = _chaos(postgres_db, cluster, rng)
        finally:
            cluster.done.set()
            for t in clients:
                t.join(GIVE_UP_SECONDS + 10)
            try:
                # Nobody writes now: the subscribers are to be told each log to its end.
                cluster.ends = _ends(postgres_db)
                stopped = time.monotonic()
                for t in subscribers:
                    t.join(max(0.0, stopped + CATCH_UP_SECONDS - time.monotonic()))
                caught_up = time.monotonic() - stopped
            finally:
                cluster.over.set()
                for t in subscribers:
                    t.join(LEASE_SECONDS + 10)
        assert not any(t.is_alive() for t in clients), "a client never finished"
        assert not any(t.is_alive() for t in subscribers), "a subscriber never finished"
        assert not cluster.died, "\n".join(cluster.died)
        for d in daemons:
            assert d.process is not None
            assert d.process.poll() is None, f"{d.root.name} exited"
        log = cluster_check.read_log(postgres_db)
        problems = (
            cluster_check.check_answers(cluster.sent, RETRYABLE)
            + cluster_check.check_log(log)
            + cluster_check.check_requests(log, cluster.sent)
            + cluster_check.check_subscriptions(log, cluster.seen, contiguous=True)
            + cluster_check.check_reached(log, cluster.reached, CATCH_UP_SECONDS)
        )
        acknowledged = _report(moves, cluster, log)
        print(f"subscribers told every log's end {caught_up:.2f} s after the clients stopped")
        assert not problems, "\n".join(problems[:50])
        assert acknowledged > CYCLES
    finally:
        stop_all(*daemons)


def test_a_subscriber_sees_the_events_another_daemon_writes(
    tmp_path: Path, postgres_db: str
) -> None:
    """A subscriber on a daemon that loses the combat is told what the other daemon writes
    (it follows the combat), with no gap, as protocol.md's ``subscribe`` promises."""
    a, b = on_store(tmp_path, postgres_db, ("a", "b"))
    try:
        at_a = a.client()
        add_spidey(at_a, "bank")
        watcher = a.client()
        seq = at_a.call("get_combat", combat="bank")["seq"]
        watcher.call("subscribe", combat="bank", after=seq)
        b.client().call(
            "add_combatant", request_id="hulk", combat="bank", id="hulk", display_name="Hulk"
        )
        at_a.call("add_combatant", request_id="thor", combat="bank", id="thor", display_name="T")
        assert watcher.notification().params["seq"] == seq + 1
    finally:
        stop_all(a, b)
