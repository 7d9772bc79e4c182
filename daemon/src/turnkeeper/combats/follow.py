"""Following: reading a combat another daemon holds, on a store many daemons share, without
taking its lease. Viewers (a table view, bots) sit on every daemon; were reads to move the
lease like commands do, they would pull it away from the daemon the narrator's commands arrive
at, and back, over and over.

A followed combat is the registry's own ``Combat``, not held (``loaded`` false) but kept at
its log's end (``followed``): read from its snapshot and log at first, then advanced by
reading the events after its seq whenever a commit's notification (``StorePort.follow_changes``)
or the periodic poll of the combats changed since a watermark (``POLL_SECONDS``) says its log
grew: the log is the truth, a notification only the wake-up. Each event read is published to
this daemon's subscribers by the same registry and per-audience telling as a command's, in seq
order. Being one object, the combat passes between following and holding with its subscribers'
place: acquiring it tells them what its last holder appended since (``handover``), before this
daemon's first command on it; letting it go leaves its state at the seq they were told
(``released``)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import anyio
import structlog
from anyio.abc import TaskStatus

from turnkeeper_engine import State, evolve
from turnkeeper_engine import events as ev
from turnkeeper_engine.plain import Plain, event_from_plain

from ..store import MAX_EVENTS_PER_READ
from ..stores.port import SharedStore, StoreError, StorePort
from ..tables import Scope
from .combat import UNBUILT, Combat, summary
from .errors import RequestError
from .rebuild import Rebuilder
from .registry import MAX_COMBATS, Combats, usable

log = structlog.get_logger("turnkeeper.combats")

MAX_FOLLOWED = 10_000
"""Combats followed at once. Past it the least recently read one nobody here subscribes to
(by ``subscribe``: a ``subscribe_all`` follows every combat, so it keeps none) is let go, its
state dropped: read again on its next use, or, for a ``subscribe_all`` here, on its next
commit, told from the seq its subscribers were. One with subscribers is kept, which the
per-connection bounds on subscriptions bound."""

POLL_SECONDS = 1.0
"""How often the store is asked which combats changed since the last time, whatever the
notifications said (``SharedStore.changed_since``): a lost notification delays an event by
at most this (and one read), for any combat, followed here or not yet."""

POLL_PAGE = 1000
"""Changed combats one query of a poll reads: a poll reads as many pages as changed."""

PAGE = MAX_EVENTS_PER_READ
"""Events one catch-up read takes: as many as a store reads at once."""

Publish = Callable[[Combat, list[tuple[int, ev.Event]], list[dict[str, Plain]]], None]


class Follower:
    """The combats this daemon reads but does not hold (``SharedStore`` only; on a store of
    its own a daemon holds every combat it reads). ``publish`` and ``watched`` are the
    subscription registry's, given once it is made."""

    def __init__(self, store: StorePort, combats: Combats, rebuilder: Rebuilder) -> None:
        self._shared = store if isinstance(store, SharedStore) else None
        self._combats = combats
        self._rebuilder = rebuilder
        self._followed: OrderedDict[str, Combat] = OrderedDict()
        """Followed combats, least recently read first."""
        self._due: dict[str, int] = {}
        """Combats whose log grew past what this daemon read of it, by last seq heard."""
        self._tables: dict[str, str] = {}
        """The tables of those of them this daemon has not heard of, as told with them."""
        self._wake = anyio.Event()
        self._poll_now = False
        self._watermark: int | None = None
        """Where the next poll reads the store's changes from: every combat changed since the
        last poll read them (or since this daemon listened) changed at it or later."""
        self._since: int | None = None
        """An earlier watermark to read from at the next poll (``missed``)."""
        self._full = False
        """Whether the last combat heard of could not be known for want of room (logged once
        until there is room again)."""
        self.publish: Publish | None = None
        self.watched: Callable[[Combat], bool] = lambda combat: False
        """Whether a subscriber here would be shown ``combat``'s events."""
        self.subscribed: Callable[[Combat], bool] = lambda combat: False
        """Whether a subscriber here follows ``combat`` by ``subscribe`` (what keeps it
        followed: a ``subscribe_all`` would keep every combat)."""
        self.follows_table: Callable[[str | None], bool] = lambda table: False
        """Whether any subscriber here follows the whole of a table (``subscribe_all``;
        None: of any table): then a combat of it another daemon made since this one started
        is known here when it is heard of."""

    async def ready(self, combat_id: str, scope: Scope = None) -> Combat:
        """The combat to read: the one this daemon holds, else (on a shared store) the one it
        follows, read from the store first if it did not; refused as ``Rebuilder.ready``."""
        if self._shared is None:
            return await self._rebuilder.ready(combat_id, scope)
        combat = await self._rebuilder.find(combat_id, scope)
        while combat.loading is not None:  # being acquired here: read it once held
            await combat.loading.wait()
        if not combat.loaded and not combat.followed and combat.quarantined is None:
            await self._follow(combat)
        if combat.followed:
            self._followed.move_to_end(combat.id)
        return usable(combat)

    async def refresh(self, combat: Combat) -> None:
        """Read a followed combat to its log's end now (nothing for one held here)."""
        if combat.followed:
            async with combat.lock:
                await self._advance(combat)

    def released(self, combat: Combat) -> None:
        """``combat`` was let go (another daemon writes it now): followed from the seq its
        subscribers here were told, if it has any."""
        if combat.loaded or combat.followed or combat.state is UNBUILT:
            return
        if combat.quarantined is None and self.watched(combat):
            self._start(combat)
            self._due[combat.id] = combat.seq
            self._wake.set()

    async def handover(self, combat: Combat, state: State, seq: int) -> None:
        """``combat`` was acquired here, its log read to ``seq`` (``state``): what its last
        holder appended since this daemon's subscribers were told is told to them now, before
        any command of this daemon's own on it, and it is no longer followed."""
        if self._shared is None:
            return  # every combat is this daemon's own: nobody else appends
        async with combat.lock:
            if combat.followed:
                if combat.seq > seq:
                    # Its subscribers were told of events past the log this load read: another
                    # daemon appended since the acquire, so it holds the combat now (this one
                    # was paused past its lease). Not loaded: the next request reads it again.
                    raise StoreError(
                        "combat_moved",
                        "combat {id!r} moved to another daemon: retry with the same request_id",
                        "combat",
                        id=combat.id,
                    )
                await self._advance(combat, seq)
                if combat.seq < seq:  # not read to the load's end: read again at the next use
                    raise StoreError(
                        "store_unavailable", "the database server could not be reached: retry later"
                    )
                self._followed.pop(combat.id, None)
                combat.followed = False
            elif combat.seq < seq and self.watched(combat):
                await self._tell(combat, state, seq)

    def woken(self, changes: dict[str, tuple[int, str | None]] | None) -> None:
        """A notification: these combats' logs reached these seqs, each of this table (None:
        not told), or (None) some may have gone untold, so the store is asked."""
        if changes is None:
            self.missed()
            return
        self._heard(changes)

    async def horizon(self) -> int | None:
        """A watermark from which the store finds every change not committed yet: its
        oldest running transaction, or, if the store could not be reached, the last poll's
        (where the next poll would read from: no later). None on a store of the daemon's
        own."""
        if self._shared is None:
            return None
        try:
            return await anyio.to_thread.run_sync(self._shared.horizon)
        except StoreError as e:
            log.warning("follow_poll_failed", reason=e.message)
            return self._watermark

    def missed(self, since: int | None = None) -> None:
        """Notifications may have gone unheard (the listener's session was lost or its queue
        overflowed), or were dropped (``since``: a ``subscribe_all`` was registered after
        commits of combats nobody here watched then, which changed at ``since`` or later):
        the store is asked at once which combats changed, from ``since`` if it is earlier
        than the next poll would."""
        if since is not None:
            self._since = since if self._since is None else min(self._since, since)
        self._poll_now = True
        self._wake.set()

    def _heard(self, changes: dict[str, tuple[int, str | None]]) -> None:
        for combat_id, (last, table) in changes.items():
            combat = self._combats.by_id.get(combat_id)
            if combat is None:
                # Made on another daemon: known here if a subscribe_all here follows its
                # table, judged by the table told, else (an older daemon's commit) looked for.
                if self.follows_table(table):
                    self._due[combat_id] = max(last, self._due.get(combat_id, 0))
                    if table is not None:
                        self._tables[combat_id] = table
                    self._wake.set()
                continue
            if combat.loaded or combat.seq >= last:
                continue  # one of this daemon's own commits, or of a combat none reads here
            if combat.followed or self.watched(combat):
                self._due[combat_id] = max(last, self._due.get(combat_id, 0))
                self._wake.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen for the store's notifications and catch the combats up, until cancelled;
        started once listening, so that a daemon serving misses no other daemon's commit."""
        shared = self._shared
        if shared is None:
            task_status.started()
            return
        async with anyio.create_task_group() as tg:
            await tg.start(shared.follow_changes, self.woken)
            # Before serving, so that nothing followed here changed before the watermark.
            self._watermark = await self.horizon()
            task_status.started()
            polled = time.monotonic()
            while True:
                with anyio.move_on_after(max(0.0, polled + POLL_SECONDS - time.monotonic())):
                    await self._wake.wait()
                self._wake = anyio.Event()
                if self._poll_now or time.monotonic() >= polled + POLL_SECONDS:
                    self._poll_now = False
                    polled = time.monotonic()
                    await self._poll(shared)
                due, self._due = self._due, {}
                tables, self._tables = self._tables, {}
                for combat_id in due:
                    combat = self._combats.by_id.get(combat_id)
                    if combat is None:
                        combat = await self._found(shared, combat_id, tables.get(combat_id))
                    if combat is not None:
                        await self._catch_up(combat)

    def _set_aside(self, combat: Combat, reason: str) -> RequestError:
        """Quarantine a followed combat whose log this daemon cannot read on (an event it
        cannot decode or replay: a newer daemon's during a rolling upgrade, a damaged row):
        no longer followed, its reads refused (``combat_quarantined``), the others followed
        on. Its state is left as it is: a read holding its lock may be judging by it (R16)."""
        self._followed.pop(combat.id, None)
        combat.followed = False
        return self._combats.set_aside(combat, reason)

    async def _poll(self, shared: SharedStore) -> None:
        """Hear every combat changed since the watermark, a page at a time: a combat followed
        here, or one of a table a ``subscribe_all`` here follows (``_heard``, as a
        notification of it would be), whoever holds it. The first page's watermark is the
        next one (a combat changed as the later pages were read is read again then)."""
        watermark, since = self._watermark, self._since
        self._since = None
        if watermark is None or (since is not None and since < watermark):
            if since is None:  # the store was not reached at the start: from now on
                try:
                    self._watermark = await anyio.to_thread.run_sync(shared.horizon)
                except StoreError as e:
                    log.warning("follow_poll_failed", reason=e.message)
                return
            watermark = since
        changed, after, horizon = watermark, "", None
        try:
            while True:
                found, rows = await anyio.to_thread.run_sync(
                    shared.changed_since, changed, after, POLL_PAGE
                )
                if horizon is None:
                    horizon = found
                self._heard({combat_id: (last, table) for combat_id, last, table, _ in rows})
                if len(rows) < POLL_PAGE:
                    break
                after, changed = rows[-1][0], rows[-1][3]
        except StoreError as e:
            if since is not None:  # read from it at the next poll
                self._since = since if self._since is None else min(self._since, since)
            log.warning("follow_poll_failed", reason=e.message)
            return
        self._watermark = horizon

    async def _found(self, shared: SharedStore, combat_id: str, table: str | None) -> Combat | None:
        """A combat another daemon made since this one started, of ``table`` (None: not
        told, so asked of the store), known from now on if a subscriber here follows its
        table (``subscribe_all`` includes combats made later) and the daemon has room for it
        (``MAX_COMBATS``)."""
        if not self._combats.has_room():
            if not self._full:
                log.warning("follow_skipped_full", combat=combat_id, limit=MAX_COMBATS)
            self._full = True
            return None
        self._full = False
        if table is None:
            try:
                table = await anyio.to_thread.run_sync(shared.locate, combat_id)
            except StoreError as e:
                log.warning("follow_failed", combat=combat_id, reason=e.message)
                return None
        if table is None or combat_id in self._combats.by_id:
            return self._combats.by_id.get(combat_id)
        found = Combat(combat_id, UNBUILT, 0, loaded=False, table=table)
        if not self.watched(found):
            return None
        self._combats.add(found)
        return found

    async def _catch_up(self, combat: Combat) -> None:
        if combat.loaded or combat.loading is not None:
            return  # held here now: its holder tells its subscribers
        try:
            if not combat.followed:
                if not self.watched(combat) or combat.quarantined is not None:
                    return
                await self._follow(combat)
            async with combat.lock:
                await self._advance(combat)
        except StoreError as e:  # the next notification or poll tries again
            log.warning("follow_failed", combat=combat.id, reason=e.message)
        except RequestError:
            pass  # set aside (``_set_aside``), and logged so
        except Exception as e:  # one combat's failure must not stop the following of the rest
            log.exception("follow_failed", combat=combat.id)
            self._set_aside(combat, f"following it failed: {e}")

    async def _follow(self, combat: Combat) -> None:
        """Start following ``combat``: from the state it has at the seq its subscribers here
        were told (a combat held here before), else read from the store, its subscribers
        (a ``subscribe_all``'s) told what they missed."""
        async with combat.lock:
            if combat.loaded or combat.followed:
                return
            if combat.state is UNBUILT:
                # Held meanwhile, the lock keeps an acquire's handover (and so its end) waiting.
                state, seq, quarantined = await self._rebuilder.read_unleased(combat.id)
                if quarantined is not None:
                    combat.quarantined = quarantined
                    log.error("combat_quarantined", combat=combat.id, reason=quarantined)
                    return
                if combat.seq < seq and self.watched(combat):
                    await self._tell(combat, state, seq)
                else:
                    combat.state, combat.seq = state, seq
                self._start(combat)
            else:
                # Held here before: its log may have grown since it was let go.
                self._start(combat)
                await self._advance(combat)

    def _start(self, combat: Combat) -> None:
        combat.followed = True
        combat.summary = None  # its rows in ``list_combats`` come from its state now
        self._followed[combat.id] = combat
        self._evict()

    def _evict(self) -> None:
        if len(self._followed) <= MAX_FOLLOWED:
            return
        for combat in list(self._followed.values()):
            # Not one whose lock is held: a catch-up being read judges it by its state (R16),
            # and a read of its log evolves that state. Let go at once (nothing awaited in
            # between), none of them is in the middle of it.
            if combat.lock.locked() or self.subscribed(combat):
                continue
            del self._followed[combat.id]
            combat.followed = False
            combat.summary = summary(combat.state, combat.seq)
            combat.state = UNBUILT
            combat.views.clear()
            if len(self._followed) <= MAX_FOLLOWED:
                return

    async def _advance(self, combat: Combat, until: int | None = None) -> None:
        """Read and publish the events after ``combat``'s seq, page by page, to the log's end
        (or to ``until``), its lock held. Raises ``StoreError`` if the store could not be
        read, and the combat's refusal if an event could not be read (``_set_aside``)."""
        while combat.followed and not combat.loaded:
            if until is not None and combat.seq >= until:
                return
            stored = [
                (s, b)
                for s, b in await self._read(combat, combat.seq)
                if until is None or s <= until
            ]
            if not stored:
                return
            state = combat.state
            events: list[tuple[int, ev.Event]] = []
            plains: list[dict[str, Plain]] = []
            for seq, body in stored:
                if seq != combat.seq + len(events) + 1:
                    break  # a page read as the log grew: the rest at the next read
                try:
                    event = event_from_plain(body)
                    state = evolve(state, event)
                except Exception as e:  # as a rebuild's replay would: this combat alone
                    raise self._set_aside(combat, f"replay failed at event {seq}: {e}") from e
                events.append((seq, event))
                plains.append(body)
            if not events:
                return
            combat.state, combat.seq = state, events[-1][0]
            self._published(combat, events, plains)
            if len(stored) < PAGE:
                return

    async def _tell(self, combat: Combat, state: State, until: int) -> None:
        """Make ``combat`` (not followed, its lock held) ``state`` at ``until``, publishing
        the events after its seq up to ``until`` (judged by ``state``, as a subscription's
        catch-up is). Its seq is what its subscribers were told: if a page cannot be told,
        it is left unread (``UNBUILT``) at the last seq told, read from the store again at
        its next use and told on from there, so that none of them misses an event."""
        after = combat.seq
        combat.state, combat.seq = state, until
        combat.told = after
        try:
            while after < until:
                stored = [(s, b) for s, b in await self._read(combat, after) if s <= until]
                if not stored:
                    return
                events = []
                for seq, body in stored:
                    try:
                        events.append((seq, event_from_plain(body)))
                    except Exception as e:
                        reason = f"event {seq} does not decode: {e}"
                        raise self._set_aside(combat, reason) from e
                self._published(combat, events, [body for _, body in stored])
                after = combat.told = stored[-1][0]
        except BaseException:
            combat.state, combat.seq = UNBUILT, after
            combat.views.clear()
            raise
        finally:
            combat.told = None

    async def _read(self, combat: Combat, after: int) -> list[tuple[int, dict[str, Plain]]]:
        """A page of events after ``after``; raises ``StoreError`` if the store could not be
        reached, and sets the combat aside (raising its refusal) if a stored event is
        unreadable."""
        assert self._shared is not None
        try:
            return await self._shared.events_after(combat.id, after, PAGE)
        except StoreError as e:
            if e.code == "store_unavailable":
                raise
            raise self._set_aside(combat, e.message) from e

    def _published(
        self, combat: Combat, events: list[tuple[int, ev.Event]], plains: list[dict[str, Plain]]
    ) -> None:
        if self.publish is not None:
            self.publish(combat, events, plains)
