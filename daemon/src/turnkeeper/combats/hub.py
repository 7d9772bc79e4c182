"""The combats' facade: ``Hub`` composes the parts of this package, each given its
collaborators explicitly, and is what sessions and the composition root (``turnkeeper.app``)
use."""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from turnkeeper_engine import BUNDLED_RULES, Actor, DiceSource, RuleBook, SystemDice
from turnkeeper_engine.pipeline import Pipeline
from turnkeeper_engine.plain import Plain
from turnkeeper_sdk import wire
from turnkeeper_sdk.plugins import PluginHost, PluginStats

from ..stores.port import SharedStore, StoreError, StorePort
from ..tables import Scope
from .clock import Clock
from .combat import Combat
from .deadlines import Deadlines
from .fanout import Subscriber, SubscriptionRegistry
from .follow import Follower
from .hooks import HookWorkers
from .listing import Lister
from .queries import Queries
from .rebuild import SNAPSHOT_EVERY, Rebuilder
from .registry import Combats
from .writer import Writer

log = structlog.get_logger("turnkeeper.combats")

_COUNTERS = frozenset(f.name for f in dataclasses.fields(PluginStats))
"""The keys of a loaded plugin's counters in ``list_plugins``."""

GC_YOUNG = 20_000
"""Net allocations of objects the cyclic collector tracks between two collections of its
youngest generation (the interpreter's default is 700). A command makes a few hundred and frees
nearly all of them by reference counting, states being trees: at 700 the collector runs every
few commands, and each run promotes whatever is alive at that instant towards the generations
whose collections walk every resident combat. At 20,000 it runs about 25 times less often
(measured in process: 0.6 µs of collection per command instead of 6.5), for a few megabytes
of cyclic garbage kept a little longer."""


ADOPT_EVERY = 1.0
"""Seconds between two scans of a store many daemons share for combats whose deadline is due
that no live daemon holds (free, or their holder dead): a deadline nobody's clock runs fires
this late at most, past its holder's lease running out."""


def tune_collector() -> None:
    """Set the process's cyclic garbage collector for a daemon. Process-wide, so called once by
    the program that serves (``turnkeeper serve``), never by a hub, which tests make many of.
    ``Hub.warm`` freezes what start-up rebuilt, which only ever lives long."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, middle, oldest)


class Hub:
    """Every combat of one daemon, its store, its dice, its rule book and its clock. The rule
    book is ``rules`` if given, else the plugin host's (the bundled rules and what the plugins
    added), else the bundled rules.

    Its parts: ``registry``, ``rebuilder``, ``writer``, ``hooks``,
    ``subscriptions``, ``queries``, ``deadlines`` and ``clock``; its methods are what sessions
    call."""

    def __init__(
        self,
        store: StorePort,
        dice: DiceSource | None = None,
        clock: Callable[[], float] = time.time,
        snapshot_every: int = SNAPSHOT_EVERY,
        plugins: PluginHost | None = None,
        rules: RuleBook | None = None,
    ) -> None:
        self.store = store
        self.plugins = plugins
        """Plugins' hooks run only while ``run_hooks`` runs."""
        self.rules: RuleBook = (
            rules if rules is not None else plugins.rules if plugins is not None else BUNDLED_RULES
        )
        """What ``decide``, the plugins' views and narration play by."""
        hooks = plugins if plugins is not None and plugins.per_command else None
        # Every command's way through: before hooks, engine, store, subscribers, hooks due (with
        # no hook plumbing at all when no loaded plugin needs it). What the writer attaches to a
        # command on its way (``Any`` here) is the writer's own business.
        pipeline: Pipeline[Any] = Pipeline(dice or SystemDice(), clock, hooks, rules=self.rules)
        # On a store many daemons share, a combat's clock runs on the daemon holding its lease.
        self.deadlines = Deadlines(owned_only=isinstance(store, SharedStore))
        self.registry = Combats(self.deadlines)
        self.combats = self.registry.by_id
        """Every combat by id (the registry's own mapping: read it, never change it)."""
        self.rebuilder = Rebuilder(store, self.registry, self.deadlines, clock, snapshot_every)
        # On a store many daemons share, what this daemon reads but another holds is followed.
        self.follower = Follower(store, self.registry, self.rebuilder)
        lister = Lister(store, self.registry, self.follower)
        self.subscriptions = SubscriptionRegistry(
            store, self.registry, self.follower, self.rules, lister
        )
        self.follower.publish = self.subscriptions.publish
        self.follower.watched = self.subscriptions.watched
        self.follower.subscribed = self.subscriptions.subscribed
        self.follower.follows_table = self.subscriptions.follows_table
        self.rebuilder.acquired = self.follower.handover
        self.queries = Queries(store, self.registry, self.follower, self.rules, lister)
        self.hooks = HookWorkers()
        self.writer = Writer(
            store=store,
            pipeline=pipeline,
            combats=self.registry,
            rebuilder=self.rebuilder,
            deadlines=self.deadlines,
            subscriptions=self.subscriptions,
            hooks=self.hooks,
            snapshot_every=snapshot_every,
            observes=hooks.after_due if hooks is not None else None,
        )
        self.clock = Clock(self.deadlines, self.rebuilder, self.writer, clock)
        self.execute = self.writer.execute
        """Apply a command once (see ``Writer.execute``): the writer's own method, so that
        every command spares a coroutine of the facade's."""

    async def recover(self) -> None:
        """Know every combat from its stored summary (see ``Rebuilder.recover``)."""
        await self.rebuilder.recover()

    async def warm(self) -> None:
        """Rebuild every combat not yet rebuilt, while requests are served; on a store many
        daemons share, none: rebuilding one takes its lease, so combats are rebuilt where
        their commands arrive."""
        if self.rebuilder.shared is None:
            await self.rebuilder.warm()

    async def run_adoption(self) -> None:
        """On a store many daemons share, until cancelled: take over the combats whose
        deadline is due that no live daemon holds (at the start, and after a daemon died), and
        rebuild them, so that this daemon's clock fires their deadlines. Exactly once, however
        many daemons scan: each combat's lease is taken by one of them, and a tick's append is
        fenced by it."""
        shared = self.rebuilder.shared
        if shared is None:
            return

        async def adopt(combat_id: str) -> None:
            try:
                combat = self.combats.get(combat_id)
                if combat is not None and combat.loaded:
                    # Held by another daemon until now: what is in memory may be behind.
                    async with combat.lock:
                        self.rebuilder.forget(combat)
                await self.rebuilder.ready(combat_id)
            except Exception:  # one combat's failed rebuild must not stop the others'
                log.exception("adopt_failed", combat=combat_id)

        while True:
            try:
                due = await anyio.to_thread.run_sync(shared.adopt_due, self.rebuilder.clock())
            except StoreError as e:  # the server may be back at the next scan
                log.warning("adopt_scan_failed", reason=str(e))
                due = []
            async with anyio.create_task_group() as tg:
                for combat_id in due:
                    tg.start_soon(adopt, combat_id)
            await anyio.sleep(ADOPT_EVERY)

    async def run_releases(self) -> None:
        """On a store many daemons share, let go of the combats other daemons ask for, until
        cancelled: each once this daemon has held it ``hold_left``, its commits in flight
        done (its writer's lock), its clock and views dropped with it; unless the request is
        about a lease older than the one held (``stale_request``: sent before this daemon
        took the combat back)."""
        shared = self.rebuilder.shared
        if shared is None:
            return
        releasing: set[str] = set()

        async def release(combat_id: str) -> None:
            try:
                while True:
                    await anyio.sleep(shared.hold_left(combat_id))
                    combat = self.combats.get(combat_id)
                    if combat is None:
                        if not shared.stale_request(combat_id):
                            await shared.release(combat_id)
                        return
                    async with combat.lock:
                        loading = combat.loading
                        kept = loading is None and shared.stale_request(combat_id)
                        if loading is None and not kept:
                            if combat.loaded:
                                self.rebuilder.forget(combat)
                            await shared.release(combat_id)
                    if loading is None:
                        if not kept:
                            self.follower.released(combat)
                        return
                    # A load in flight read the log as it stood at its acquire: let go before
                    # it is done, and another daemon would append behind it, and this one
                    # answer from what it read (a command refused by a stale state). Once it
                    # is done, the combat is held its minimum hold from that acquire.
                    await loading.wait()
            except Exception:  # one combat's failed release must not stop the others'
                log.exception("release_failed", combat=combat_id)
            finally:
                releasing.discard(combat_id)

        async with anyio.create_task_group() as tg:
            async for combat_id in shared.release_requests():
                if combat_id not in releasing:  # the asker asks again while it waits
                    releasing.add(combat_id)
                    tg.start_soon(release, combat_id)

    async def run_follow(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """On a store many daemons share, keep the combats read here but held elsewhere at
        their logs' ends, telling their subscribers, until cancelled (``Follower.run``);
        started once it listens."""
        await self.follower.run(task_status=task_status)

    async def run_clock(self) -> None:
        """Tick every combat at its deadlines until cancelled (R13)."""
        await self.clock.run()

    async def run_hooks(self) -> None:
        """Run plugins' hooks of committed commands until cancelled."""
        await self.hooks.run(self.writer)

    async def combat(self, combat_id: str) -> Combat:
        """The combat, rebuilt first if it was not yet; refused if unknown or quarantined."""
        return await self.rebuilder.ready(combat_id)

    async def view(self, combat_id: str, actor: Actor, scope: Scope = None) -> wire.Packed:
        """The combat as ``actor`` may see it, encoded for the wire; unknown outside ``scope``."""
        return await self.queries.view(combat_id, actor, scope)

    async def history(
        self,
        combat_id: str,
        actor: Actor,
        after: int,
        limit: int,
        locale: str | None = None,
        scope: Scope = None,
    ) -> Plain:
        """A page of the combat's events as ``actor`` may see them; unknown outside ``scope``."""
        return await self.queries.history(combat_id, actor, after, limit, locale, scope)

    def told(self, combat_id: str, events: Plain, actor: Actor, locale: str) -> list[Plain]:
        """A command result's events with their narrated lines."""
        return self.queries.told(combat_id, events, actor, locale)

    async def summaries(
        self, after: str | None = None, limit: int | None = None, scope: Scope = None
    ) -> Plain:
        """One row per combat of a page of ``scope``'s tables (None: every table)."""
        return await self.queries.summaries(after, limit, scope)

    def plugin_listing(self, counters: bool = True) -> Plain:
        """The plugins loaded (with their counters, if ``counters``), failed and skipped. The
        counters are the daemon's, every table's calls together: they are the operator's to
        read, for a session of one table would see them move with another table's play."""
        if self.plugins is None:
            return {"loaded": [], "failed": [], "skipped": []}
        listing = self.plugins.listing()
        if not counters:
            listing["loaded"] = [
                {k: v for k, v in p.items() if k not in _COUNTERS} for p in listing["loaded"]
            ]
        return listing

    async def subscribe(
        self, combat_id: str, subscriber: Subscriber, after: int, scope: Scope = None
    ) -> int:
        """Missed events, then live ones (see ``SubscriptionRegistry.subscribe``)."""
        return await self.subscriptions.subscribe(combat_id, subscriber, after, scope)

    async def subscribe_all(
        self, subscriber: Subscriber, limit: int | None = None, scope: Scope = None
    ) -> Plain:
        """Live events of every combat of ``scope``'s tables (see
        ``SubscriptionRegistry.subscribe_all``)."""
        return await self.subscriptions.subscribe_all(subscriber, limit, scope)

    def visible(self, combat_id: str, scope: Scope) -> bool:
        """Whether a session of ``scope`` may know of ``combat_id`` (see ``Combats.visible``)."""
        return self.registry.visible(combat_id, scope)

    def widen(self, subscriber: Subscriber, tables: frozenset[str]) -> None:
        """A ``subscribe_all`` scoped to tables follows ``tables`` too."""
        self.subscriptions.widen(subscriber, tables)

    def unsubscribe(self, subscriber: Subscriber, combat_id: str) -> None:
        """Stop the subscriber's events of one combat."""
        self.subscriptions.unsubscribe(subscriber, combat_id)

    def unsubscribe_all(self, subscriber: Subscriber) -> None:
        """Stop the subscriber's ``subscribe_all`` events."""
        self.subscriptions.unsubscribe_all(subscriber)

    def forget(self, subscriber: Subscriber) -> None:
        """Drop every subscription of a subscriber that disconnected."""
        self.subscriptions.drop(subscriber)
