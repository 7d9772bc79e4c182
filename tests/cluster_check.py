"""The cluster test's checker: what clients and subscribers were told, held against the log the
daemons left in PostgreSQL. Each check returns the problems it found, every one naming its
combat, seq or request, so that one failing run says all that went wrong."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack  # type: ignore[import-untyped]

from postgres import sql
from turnkeeper.stores.postgresql import SCHEMA

Log = dict[str, list[tuple[int, dict[str, Any]]]]
"""Each combat's events as stored: (seq, event map without its seq), in seq order."""

UNSEQUENCED = ("seq", "summary")
"""Keys a client's copy of an event has and the stored body may not: compared without them."""

LOST = "connection_lost"
"""An ``Answer``'s error when the connection was lost before the answer came."""


@dataclass
class Answer:
    """One answer a client got for a request id: a result or an error's code."""

    daemon: str
    at: float
    """When it came (``time.monotonic``)."""
    result: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Sent:
    """One command with its request id, and every answer it got (retries and repeats)."""

    request_id: str
    combat: str
    answers: list[Answer] = field(default_factory=list)

    @property
    def results(self) -> list[Answer]:
        return [a for a in self.answers if a.result is not None]


@dataclass
class Seen:
    """What one subscription (one connection, one combat) received, in arrival order."""

    subscriber: str
    combat: str
    after: int
    """The seq it subscribed after: its first event should be the next one."""
    events: list[dict[str, Any]] = field(default_factory=list)


def read_log(dsn: str) -> Log:
    log: Log = {}
    for combat_id, seq, body in sql(
        dsn, f"SELECT combat_id, seq, body FROM {SCHEMA}.events ORDER BY combat_id, seq"
    ):
        log.setdefault(combat_id, []).append((seq, _bare(msgpack.unpackb(body, raw=False))))
    return log


def _bare(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in UNSEQUENCED and k != "combat"}


def check_answers(sent: list[Sent], retryable: set[str]) -> list[str]:
    """Every command answered in the end, and never refused but with a code to retry (or a
    lost connection): a retried request id is answered its first result, not refused."""
    problems = []
    for s in sent:
        told = [f"{a.daemon} {a.error or 'result'} at {a.at:.1f}" for a in s.answers]
        refused = [a.error for a in s.answers if a.error not in (None, LOST, *retryable)]
        if refused:
            problems.append(f"combat {s.combat}, request {s.request_id}: refused {refused}: {told}")
        elif not s.results:
            problems.append(f"combat {s.combat}, request {s.request_id}: never answered: {told}")
    return problems


def check_log(log: Log) -> list[str]:
    """Per combat: seqs unique and gapless from 1."""
    problems = []
    for combat_id, events in log.items():
        seqs = [seq for seq, _ in events]
        if seqs != list(range(1, len(seqs) + 1)):
            expected = next((i for i, seq in enumerate(seqs, start=1) if seq != i), len(seqs) + 1)
            problems.append(f"combat {combat_id}: seq {expected} missing or repeated in {seqs}")
    return problems


def check_requests(log: Log, sent: list[Sent]) -> list[str]:
    """Every acknowledged command present exactly once, at the seqs its result named, with the
    events its result carried; every answer to its request id the first result; and every
    event of the log claimed by exactly one acknowledged command (for runs where every
    command sent was answered in the end, and nothing else writes: no clock, no plugins)."""
    problems = []
    stored = {combat_id: dict(events) for combat_id, events in log.items()}
    claimed: dict[tuple[str, int], str] = {}
    for s in sent:
        results = s.results
        if not results:
            continue
        first = results[0].result
        assert first is not None
        for again in results[1:]:
            if again.result != first:
                problems.append(
                    f"combat {s.combat}, request {s.request_id}: daemon {again.daemon} answered "
                    f"{again.result}, not the first result {first} (from {results[0].daemon})"
                )
        for event in first["events"]:
            seq = event["seq"]
            in_log = stored.get(s.combat, {}).get(seq)
            if in_log is None:
                problems.append(
                    f"combat {s.combat}, seq {seq}: acknowledged to request {s.request_id} "
                    "but not in the log"
                )
            elif in_log != _bare(event):
                problems.append(
                    f"combat {s.combat}, seq {seq}: request {s.request_id} was told {event}, "
                    f"the log has {in_log}"
                )
            other = claimed.setdefault((s.combat, seq), s.request_id)
            if other != s.request_id:
                problems.append(
                    f"combat {s.combat}, seq {seq}: claimed by requests {other} and {s.request_id}"
                )
    for combat_id, events in log.items():
        for seq, event in events:
            if (combat_id, seq) not in claimed:
                problems.append(
                    f"combat {combat_id}, seq {seq}: {event.get('event')} in the log, "
                    "acknowledged to no request"
                )
    return problems


def check_subscriptions(log: Log, seen: list[Seen], contiguous: bool) -> list[str]:
    """Every subscription received events of the log, each as logged, in seq order, none
    twice; with ``contiguous``, also without a gap from the seq after the one it subscribed
    after (a prefix of the log past ``after``)."""
    problems = []
    stored = {combat_id: dict(events) for combat_id, events in log.items()}
    for s in seen:
        expected = s.after + 1
        for event in s.events:
            seq = event["seq"]
            where = f"subscriber {s.subscriber}, combat {s.combat}, seq {seq}"
            if seq < expected:
                problems.append(f"{where}: out of order or twice, after seq {expected - 1}")
                break
            if seq > expected and contiguous:
                problems.append(f"{where}: seqs {expected} to {seq - 1} never came")
                break
            if stored.get(s.combat, {}).get(seq) != _bare(event):
                problems.append(
                    f"{where}: received {event}, the log has {stored.get(s.combat, {}).get(seq)}"
                )
            expected = seq + 1
    return problems


def check_reached(log: Log, reached: dict[str, dict[str, int]], within: float) -> list[str]:
    """Every subscriber (by daemon) was told each combat's log to its end, ``within`` seconds
    of the clients' stop."""
    problems = []
    for subscriber, lasts in reached.items():
        for combat_id, events in log.items():
            end = events[-1][0] if events else 0
            last = lasts.get(combat_id, 0)
            if last < end:
                problems.append(
                    f"subscriber on {subscriber}, combat {combat_id}: told up to seq {last}"
                    f" {within:.0f} s after the clients stopped, the log ends at {end}"
                )
    return problems
