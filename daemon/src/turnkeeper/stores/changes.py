"""Telling other daemons that a combat's log grew: one ``NOTIFY`` channel every daemon on a
database writes to in its commit transactions and listens on, on one session of its own.

A notification is only a wake-up: it says which combats reached which last seq (and the table
of each, so that a daemon that has not heard of a combat knows without asking whether anyone
there follows it), and the log says what happened. One that is lost is caught up by the next
for that combat, or by the follower's periodic poll; the follower is told to ask the store at
once when the listener's session is opened anew, or its queue was full.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import anyio
import anyio.from_thread
import anyio.lowlevel
import psycopg
import structlog
from anyio.abc import TaskStatus

log = structlog.get_logger("turnkeeper.store")

CHANNEL = "turnkeeper_events"
"""The one channel every daemon's commits notify and every daemon listens on."""

MAX_PAYLOAD_BYTES = 7000
"""Bytes of one notification's payload: PostgreSQL refuses 8000 or more. A group commit's
combats are split over as many notifications as they need (a combat id of 128 four-byte
characters and a table id take under 650 bytes)."""

WAKE_QUEUE = 64
"""Notifications waiting for the event loop; past it they are dropped, counted, and the
follower told to ask the store once it reads on (``Relay``)."""

LISTEN_WAIT = 1.0
"""Seconds the listener's thread waits for a notification before it looks whether to stop."""

RECONNECT_PAUSE = 1.0
"""Seconds between two tries to open the listener's session again, once lost."""


class Change(NamedTuple):
    """What a notification says of one combat."""

    last: int
    """Its last seq."""
    table: str | None
    """Its table; None from a daemon of an earlier version (during a rolling upgrade), which
    told none: the store is asked then."""


Changes = dict[str, Change]
"""What changed of each combat whose log grew, by id."""


def payloads(appended: Sequence[tuple[str, int, str]]) -> list[str]:
    """The payloads telling ``appended`` (combat id, last seq, table), each under
    ``MAX_PAYLOAD_BYTES``: JSON triples, since a combat id may hold any character."""
    chunks: list[str] = []
    pairs: list[str] = []
    size = 2
    for combat_id, last, table in appended:
        pair = json.dumps([combat_id, last, table], ensure_ascii=False)
        if pairs and size + len(pair.encode()) + 1 > MAX_PAYLOAD_BYTES:
            chunks.append(f"[{','.join(pairs)}]")
            pairs, size = [], 2
        pairs.append(pair)
        size += len(pair.encode()) + 1
    if pairs:
        chunks.append(f"[{','.join(pairs)}]")
    return chunks


def notify(db: psycopg.Connection[Any], appended: Sequence[tuple[str, int, str]]) -> None:
    """Notify ``appended`` in ``db``'s open transaction: delivered when (and only if) it
    commits. One statement however many payloads."""
    chunks = payloads(appended)
    if chunks:
        db.execute("SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (CHANNEL, chunks))


def parse(payload: str) -> Changes:
    """A notification's combats, last seqs and tables, told as triples, or as pairs (no
    table) by a daemon of an earlier version; nothing from a payload not of this module's
    making (another program on the channel)."""
    try:
        told: Changes = {}
        for item in json.loads(payload):
            combat_id, last, *table = item
            if len(table) > 1:
                raise ValueError(item)
            told[str(combat_id)] = Change(int(last), str(table[0]) if table else None)
        return told
    except (ValueError, TypeError):
        return {}


class Relay:
    """What the listener hears, on its way to the event loop: ``WAKE_QUEUE`` notifications
    waiting at most. Past it they are dropped (the event loop is too busy to read them) and
    counted; once the loop reads on, the follower is handed None with the next (some went
    untold: ask the store), at once rather than at its next poll, and the drop logged, once
    per overflow however many were dropped."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[Changes | None](WAKE_QUEUE)
        self._dropped = 0
        """Dropped since the follower was last handed None."""
        self.dropped = 0
        """Dropped since the start, for the log."""

    def put(self, changes: Changes | None) -> None:
        """Queue one notification's changes (None: ask the store); on the event loop."""
        try:
            self._send.send_nowait(changes)
        except anyio.WouldBlock:
            self._dropped += 1
            self.dropped += 1

    def close(self) -> None:
        """Queue nothing more: ``relay`` returns once it handed what waits."""
        self._send.close()

    async def relay(self, woken: Callable[[Changes | None], None]) -> None:
        """Hand what is queued to ``woken``, in order, until closed."""
        async with self._receive:
            async for changes in self._receive:
                woken(changes)
                # Dropped only while the queue was full: what it held is still to be read, so
                # this is met after any drop.
                if self._dropped:
                    log.warning(
                        "store_notifications_dropped", dropped=self._dropped, total=self.dropped
                    )
                    self._dropped = 0
                    woken(None)


class Listener:
    """``LISTEN`` on ``CHANNEL`` on a session of its own (``connect``), in a thread; what it
    hears is handed to ``woken`` on the event loop: each notification's changes, and None
    whenever its session was (re)opened, since notifications were lost meanwhile."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], reason: Callable[[Exception], str]
    ):
        self._connect = connect
        self._reason = reason
        self._closed = threading.Event()

    async def run(
        self,
        woken: Callable[[Changes | None], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen until cancelled; started once the first session listens (or failed to)."""
        relay = Relay()
        token = anyio.lowlevel.current_token()
        first = threading.Event()

        def hand(changes: Changes | None) -> None:
            with contextlib.suppress(anyio.ClosedResourceError, RuntimeError):
                anyio.from_thread.run_sync(relay.put, changes, token=token)

        thread = threading.Thread(
            target=self._listen, args=(hand, first), name="turnkeeper-changes", daemon=True
        )
        thread.start()
        try:
            await anyio.to_thread.run_sync(first.wait, abandon_on_cancel=True)
            task_status.started()
            await relay.relay(woken)
        finally:
            self._closed.set()
            relay.close()

    def _listen(self, hand: Callable[[Changes | None], None], first: threading.Event) -> None:
        while not self._closed.is_set():
            db: psycopg.Connection[Any] | None = None
            try:
                db = self._connect()
                db.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(CHANNEL)))
                first.set()
                hand(None)  # what was appended while nobody listened: read from the log
                while not self._closed.is_set():
                    for notice in db.notifies(timeout=LISTEN_WAIT):
                        hand(parse(notice.payload))
            except psycopg.Error as e:
                log.warning("store_listener_lost", reason=self._reason(e))
                first.set()  # serve meanwhile: the follower's poll reads the log
                self._closed.wait(RECONNECT_PAUSE)
            finally:
                if db is not None:
                    db.close()
