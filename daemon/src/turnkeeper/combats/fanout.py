"""Subscriptions and fan-out: one registry of who follows which combat (and who follows every
combat), indexed both by combat and by subscriber, and the publishing of committed events.

The registry is the one record of a subscription: a session asks it, never keeps its own. A
subscriber whose events cannot be sent (its outbox is full, or its audience's events failed to
be told or packed) loses every subscription at once and is told so (``Subscriber.lost``): it
then ends its connection with a final error notification, after which a client resubscribes
from the last seq it processed, as after any reconnect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgpack  # type: ignore[import-untyped]
import structlog

from turnkeeper_engine import Actor, RuleBook
from turnkeeper_engine import events as ev
from turnkeeper_engine.plain import Plain, event_from_plain

from ..stores.port import StoreError, StorePort
from ..tables import Scope
from .combat import Combat
from .errors import RequestError
from .follow import Follower
from .listing import Lister
from .registry import Combats
from .telling import Batch, audience, numbered, packed, packed_rows

log = structlog.get_logger("turnkeeper.combats")

MAX_CATCH_UP = 1000
"""Missed events a subscription replays before going live; further behind, a client reads the
combat's state and history first (``too_far_behind``), so no outbox ever holds a whole log."""


Audience = tuple[str, str | None, str | None]
"""Subscribers shown the very same bytes: who they are to R16 (``audience``) and the locale
their events are told in."""


class Subscriber(Protocol):
    """A connection's side of a subscription. Its ``actor`` and ``narration`` stay the same
    while it follows anything (a session's are set by its one hello, before it may follow)."""

    actor: Actor
    narration: str | None
    """The locale this subscriber's events are told in (their ``summary``), or None for none."""

    def deliver(self, batch: Batch) -> bool:
        """Queue a batch of packed ``event`` notifications, all or none; False when the
        subscriber cannot keep up (it then ends its connection itself, and the registry drops
        it). The batch is shared with the rest of its audience, never changed."""
        ...

    def room(self) -> int:
        """How many more messages can be queued right now."""
        ...

    def lost(self) -> None:
        """Its events could not be told or packed: every subscription of it is gone, and it
        must say so to its client (which resubscribes without a gap)."""
        ...


class SubscriptionRegistry:
    """Who follows which combat, and who follows all of them (``subscribe_all``)."""

    def __init__(
        self, store: StorePort, combats: Combats, reader: Follower, rules: RuleBook, lister: Lister
    ):
        self._store = store
        self._lister = lister
        self._combats = combats
        self._reader = reader
        self._rules = rules
        self._by_combat: dict[str, dict[Audience, set[Subscriber]]] = {}
        """The subscribers of each combat by audience, so that a command's events are shown
        and packed once per audience by a walk that meets no subscriber; an entry per combat
        that has any, and per audience that has any."""
        self._by_subscriber: dict[Subscriber, set[str]] = {}
        """The combats each subscriber follows, so that a disconnect leaves them without a walk
        over every combat; an entry per subscriber that follows any."""
        self._everywhere: dict[Audience, set[Subscriber]] = {}
        """Who follows every combat of every table (the operator's ``subscribe_all``), by
        audience likewise."""
        self._by_table: dict[str, dict[Audience, set[Subscriber]]] = {}
        """Who follows every combat of a table (``subscribe_all`` of a session scoped to
        tables), by table, then by audience likewise."""
        self._tables: dict[Subscriber, set[str]] = {}
        """The tables each of those follows, so that it leaves them without a walk."""
        self._packer = msgpack.Packer(use_bin_type=True)
        """The event loop's packer for the notifications made from a command's rows
        (``packed_rows``): the options of the rows' own packer and of ``wire.pack``'s."""

    def follows(self, subscriber: Subscriber, combat_id: str) -> bool:
        """Whether ``subscriber`` follows ``combat_id`` (by ``subscribe``)."""
        return combat_id in self._by_subscriber.get(subscriber, ())

    def follows_all(self, subscriber: Subscriber) -> bool:
        """Whether ``subscriber`` follows every combat (by ``subscribe_all``)."""
        return subscriber in self._tables or subscriber in self._everywhere.get(
            _audience(subscriber), ()
        )

    def watched(self, combat: Combat) -> bool:
        """Whether anyone here would be shown ``combat``'s events (by ``subscribe`` or
        ``subscribe_all``)."""
        return (
            combat.id in self._by_combat or combat.table in self._by_table or bool(self._everywhere)
        )

    def subscribed(self, combat: Combat) -> bool:
        """Whether anyone here follows ``combat`` by ``subscribe``."""
        return combat.id in self._by_combat

    def follows_table(self, table: str | None) -> bool:
        """Whether anyone here follows the whole of ``table`` (``subscribe_all``; None: of
        any table)."""
        if self._everywhere:
            return True
        return table in self._by_table if table is not None else bool(self._by_table)

    def subscribers(self, combat_id: str) -> set[Subscriber]:
        """Who follows ``combat_id`` by ``subscribe`` (a copy)."""
        return set().union(*self._by_combat.get(combat_id, {}).values())

    async def subscribe(
        self, combat_id: str, subscriber: Subscriber, after: int, scope: Scope = None
    ) -> int:
        """Missed events first, then live, with no gap and no duplicate: the catch-up is read
        and the subscriber registered while the combat's writer is held. A combat of a table
        outside ``scope`` is unknown."""
        if self.follows(subscriber, combat_id):
            raise RequestError("already_subscribed", "subscribed to it already", "combat")
        while True:
            combat = await self._reader.ready(combat_id, scope)
            if after > combat.seq:
                # Seen on another daemon further on than this one has read (a followed combat).
                await self._reader.refresh(combat)
            async with combat.lock:
                if combat.loaded or combat.followed:
                    return await self._caught_up(combat, subscriber, after)
            # Let go while this waited for its lock (another daemon took it, or it was no
            # longer followed and its state dropped): read again, never judged by no state
            # (R16).

    async def _caught_up(self, combat: Combat, subscriber: Subscriber, after: int) -> int:
        """``subscribe``'s catch-up and registration, the combat's lock held."""
        if after < 0 or after > combat.seq:
            raise RequestError("invalid_params", "after must be 0..{seq}", "after", seq=combat.seq)
        if combat.seq - after > MAX_CATCH_UP:
            raise RequestError(
                "too_far_behind",
                "more than {limit} events behind: read get_combat and history first",
                "after",
                limit=MAX_CATCH_UP,
            )
        try:
            stored = await self._store.events_after(combat.id, after, MAX_CATCH_UP)
        except StoreError as e:
            raise self._combats.quarantine(combat, e) from e
        # A followed combat's log may have grown past what this daemon read of it: those
        # events come live, with the rest of their read (``Follower``).
        stored = [(seq, body) for seq, body in stored if seq <= combat.seq]
        events = [(seq, event_from_plain(body)) for seq, body in stored]
        shown = numbered(
            events,
            combat.state,
            subscriber.actor,
            locale=subscriber.narration,
            rules=self._rules,
        )
        batch = packed(combat.id, shown)
        if len(batch.messages) > subscriber.room():
            raise RequestError("too_far_behind", "the catch-up does not fit the outbox", "after")
        if batch.messages:
            subscriber.deliver(batch)
        _join(self._by_combat.setdefault(combat.id, {}), subscriber)
        self._by_subscriber.setdefault(subscriber, set()).add(combat.id)
        return combat.seq

    async def subscribe_all(
        self, subscriber: Subscriber, limit: int | None = None, scope: Scope = None
    ) -> Plain:
        """Live events of every combat, new ones included, from now on. The last seq of each
        combat of the first page (see ``Lister.page``) is returned, so a client can catch up
        on any with ``history``; ``until`` is the page's last id and ``more`` whether combats
        follow it, whose seqs ``list_combats`` pages on with. A refused request subscribes
        nothing. ``scope`` is the tables followed (None: every table)."""
        if self.follows_all(subscriber):
            raise RequestError("already_subscribed", "subscribed to all already", "method")
        # Taken before the page is read: every commit the page does not show changed at it or
        # later, where the store is asked from below.
        since = await self._reader.horizon()
        page, more = await self._lister.page(None, limit, scope)
        # Registered with nothing awaited since the page was made (``Lister.page``), and only
        # if no other ``subscribe_all`` of this subscriber got in while it was read.
        if self.follows_all(subscriber):
            raise RequestError("already_subscribed", "subscribed to all already", "method")
        seqs: dict[str, Plain] = {
            str(r["combat"]): r["seq"] for r in page if "quarantined" not in r
        }
        if scope is None:
            _join(self._everywhere, subscriber)
        else:
            self._tables[subscriber] = set()
            self.widen(subscriber, scope)
        # A commit heard while the page was read, of a combat nobody here watched then, was
        # dropped, its seq on the page (or its combat) older than its log: the combats changed
        # since ``since`` are read from the store now that this subscriber watches them, each
        # told from the seq it was answered with.
        self._reader.missed(since)
        until = page[-1]["combat"] if page else None
        return {"seqs": seqs, "until": until, "more": more}

    def widen(self, subscriber: Subscriber, tables: frozenset[str]) -> None:
        """Add ``tables`` to what a ``subscribe_all`` scoped to tables follows (a table its
        session made or was granted); nothing for a subscriber that does not follow all."""
        followed = self._tables.get(subscriber)
        if followed is None:
            return
        for table in tables - followed:
            followed.add(table)
            _join(self._by_table.setdefault(table, {}), subscriber)

    def _leave_tables(self, subscriber: Subscriber) -> None:
        for table in self._tables.pop(subscriber, ()):
            followers = self._by_table[table]
            _part(followers, subscriber)
            if not followers:
                del self._by_table[table]

    def unsubscribe(self, subscriber: Subscriber, combat_id: str) -> None:
        """Stop the subscriber's events of one combat (nothing when it did not follow it)."""
        following = self._by_subscriber.get(subscriber)
        if following is None or combat_id not in following:
            return
        following.discard(combat_id)
        if not following:
            del self._by_subscriber[subscriber]
        self._leave(subscriber, combat_id)

    def unsubscribe_all(self, subscriber: Subscriber) -> None:
        """Stop ``subscribe_all``'s events (combats subscribed one by one go on)."""
        _part(self._everywhere, subscriber)
        self._leave_tables(subscriber)

    def drop(self, subscriber: Subscriber) -> None:
        """Forget every subscription of ``subscriber`` (a disconnect): only the combats it
        follows are visited."""
        _part(self._everywhere, subscriber)
        self._leave_tables(subscriber)
        for combat_id in self._by_subscriber.pop(subscriber, set()):
            self._leave(subscriber, combat_id)

    def _leave(self, subscriber: Subscriber, combat_id: str) -> None:
        followers = self._by_combat.get(combat_id)
        if followers is not None:
            _part(followers, subscriber)
            if not followers:
                del self._by_combat[combat_id]

    def publish(
        self,
        combat: Combat,
        events: list[tuple[int, ev.Event]],
        plains: list[dict[str, Plain]],
        rows: Sequence[bytes] | None = None,
    ) -> None:
        """Send a combat's newly committed events to everyone following it, each shown as its
        audience may see them (R16): filtered and packed once per audience into one batch,
        which each of its subscribers is handed as it is. ``rows``, the events as the store
        was given them (``plains`` packed), if known, are not packed again."""
        by_combat = self._by_combat.get(combat.id)
        followers_of_table = self._by_table.get(combat.table)
        if by_combat is None and followers_of_table is None and not self._everywhere:
            return  # followed by nobody: every command of a combat nobody watches comes here
        batches: dict[Audience, Batch | None] = {}
        failed: list[Subscriber] = []
        lagging: list[Subscriber] = []
        for groups in (by_combat or {}, self._everywhere, followers_of_table or {}):
            # Walked over copies: a subscriber that left as it was handed its batch must not
            # cut the walk short (the audiences after it would miss a committed command).
            for key, followers in list(groups.items()):
                if key in batches:
                    batch = batches[key]
                else:
                    batch = batches[key] = self._batch(combat, events, plains, rows, key, followers)
                if batch is None:
                    # The command is committed; a subscriber its events cannot be shown to
                    # loses its subscriptions, and is told, rather than receive a gap.
                    failed.extend(followers)
                elif batch.messages:
                    for subscriber in tuple(followers):
                        if not subscriber.deliver(batch):
                            lagging.append(subscriber)  # it ends its connection itself
        for subscriber in [*failed, *lagging]:
            self.drop(subscriber)
        for subscriber in failed:
            subscriber.lost()

    def _batch(
        self,
        combat: Combat,
        events: list[tuple[int, ev.Event]],
        plains: list[dict[str, Plain]],
        rows: Sequence[bytes] | None,
        key: Audience,
        followers: set[Subscriber],
    ) -> Batch | None:
        """The events as ``key``'s audience is shown them (None if that failed): any of its
        followers stands for all of them."""
        one = next(iter(followers))
        try:
            if rows is not None and one.narration is None:
                return packed_rows(
                    combat.id, events, combat.state, one.actor, plains, rows, self._packer
                )
            shown = numbered(
                events, combat.state, one.actor, plains, one.narration, rules=self._rules
            )
            return packed(combat.id, shown)
        except Exception:
            log.exception("publish_failed", combat=combat.id, audience=key)
            return None


def _audience(subscriber: Subscriber) -> Audience:
    # Worked out again where a subscriber leaves: its actor and language are settled at hello,
    # before it can subscribe, and never change after.
    return (*audience(subscriber.actor), subscriber.narration)


def _join(groups: dict[Audience, set[Subscriber]], subscriber: Subscriber) -> None:
    groups.setdefault(_audience(subscriber), set()).add(subscriber)


def _part(groups: dict[Audience, set[Subscriber]], subscriber: Subscriber) -> None:
    key = _audience(subscriber)
    followers = groups.get(key)
    if followers is not None:
        followers.discard(subscriber)
        if not followers:
            del groups[key]
