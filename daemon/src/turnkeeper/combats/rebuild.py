"""Rebuilding combats from the store: every one known at start from its summary
(``recover``), rebuilt behind the daemon's back (``warm``) or on first use (``ready``), each
once however many tasks need it."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import anyio
import structlog

from turnkeeper_engine import State, evolve
from turnkeeper_engine.plain import event_from_plain, from_shared, to_shared

from ..stores.port import Batch, LoadedCombat, SharedStore, StoreError, StorePort
from ..tables import DEFAULT_TABLE, Scope
from .combat import UNBUILT, Combat, summary
from .deadlines import Deadlines
from .errors import RequestError
from .registry import MAX_COMBATS, Combats, unknown_combat, usable

log = structlog.get_logger("turnkeeper.combats")

SNAPSHOT_EVERY = 1000
"""Events between two snapshots of a combat: start-up replays at most this many per combat,
and a snapshot (the state with its undo history, shared parts stored once) stays cheap."""

LOAD_THREADS = 2
"""Combats rebuilt at once, each in a worker thread of the rebuilder's own: a combat with a
long log to replay (an upgrade's first start) leaves room for another's first use, and rebuilds
never take the threads the store's committer needs."""

WARM_BATCH = 100
"""Combats ``warm`` rebuilds in one worker thread's call: the event loop pays for a hand-over
to a thread once per batch, not per combat (at 100,000 combats of two events each, warming
took 55 to 65 s against 66 to 72 s one at a time, on a machine loaded twice over)."""

REBUILD_YIELD_EVENTS = 100
"""Events a rebuild replays between two offers of the GIL to the event loop's thread (a few
milliseconds of work): left to the interpreter's switch interval, each of the many hand-overs
one request needs would wait up to 5 ms behind the rebuild."""


class _AbandonedError(Exception):
    """The task that wanted a rebuild was cancelled: its worker thread stops reading."""


@dataclass(frozen=True)
class _Rebuilt:
    """What a rebuild (in a worker thread) found: the state at ``seq``, and ``fresh``, whether
    that state is worth a new snapshot (see ``Rebuilder._rebuild``)."""

    state: State
    seq: int
    snapshot_seq: int
    quarantined: str | None = None
    epoch: int | None = None
    """The lease's epoch it was read under (``LoadedCombat.epoch``)."""
    unavailable: StoreError | None = None
    """The store could not be reached (``store_unavailable``), or another daemon took the
    combat over while it was read (``combat_moved``): the combat is left unbuilt, for the next
    request to rebuild, and not quarantined."""
    fresh: bool = False
    passed_over: tuple[str, ...] = ()
    """Why a stored snapshot was passed over: logged by ``_settle`` when this rebuild is the
    one kept, as ``warm`` may read a combat that a request then rebuilds for itself."""


class Rebuilder:
    """Brings the combats of ``combats`` from the store into memory; a rebuilt combat's
    deadline goes to the clock (``deadlines``)."""

    def __init__(
        self,
        store: StorePort,
        combats: Combats,
        deadlines: Deadlines,
        clock: Callable[[], float],
        snapshot_every: int,
    ) -> None:
        self.store = store
        self.combats = combats
        self.deadlines = deadlines
        self.clock = clock
        self.snapshot_every = snapshot_every
        self.shared = store if isinstance(store, SharedStore) else None
        """The store, when many daemons share it: a combat another daemon made since this
        one started is looked for there."""
        self._limiter: anyio.CapacityLimiter | None = None
        """Worker threads for rebuilds (``LOAD_THREADS``)."""
        self.acquired: Callable[[Combat, State, int], Awaitable[None]] | None = None
        """Called with a combat rebuilt for this daemon to write (its lease taken, on a shared
        store), its state and seq, before anything else sees it (``Follower.handover``)."""

    async def recover(self) -> None:
        """Know every combat at once from its stored summary, so the daemon serves right away;
        a combat without one is rebuilt now. The others are rebuilt by ``warm`` behind the
        daemon's back, or on first use, whichever comes first. Call with the store running: a
        rebuild may store a fresh snapshot."""
        found: list[Combat] = []
        unsummed: list[Combat] = []
        tables = self.store.memberships()
        # Every object made here lives as long as the daemon: a collection meanwhile would only
        # rescan them, ever more of them (at 100,000 combats a start made two full ones). The
        # garbage made so far (loading modules, plugins) is collected first, never frozen.
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            for combat_id, stored in self.store.summaries():
                if isinstance(stored, dict) and isinstance(stored.get("seq"), int):
                    combat = Combat(combat_id, UNBUILT, stored["seq"], loaded=False, summary=stored)
                else:
                    combat = Combat(combat_id, State(), 0, loaded=False)
                    unsummed.append(combat)
                combat.table = tables.get(combat_id, DEFAULT_TABLE)
                found.append(combat)
        finally:
            if enabled:
                gc.enable()
        # Nor should any later collection: frozen, they are never scanned again (and still
        # freed by reference counting, as a summary is once its combat is rebuilt).
        gc.freeze()
        for combat in unsummed:
            await self.load_once(combat)
        self.combats.recovered(found)

    async def warm(self) -> None:
        """Rebuild every combat not yet rebuilt, ``WARM_BATCH`` at a time in one worker
        thread, while requests are served. A batch claims none of its combats while it reads
        them: one that a request needs meanwhile is rebuilt for it at once (``load_once``), and
        the batch's rebuild of it is dropped."""
        started = time.perf_counter()
        waiting = [c for c in self.combats.by_id.values() if not c.loaded]
        rebuilt = 0
        for at in range(0, len(waiting), WARM_BATCH):
            batch = [c for c in waiting[at : at + WARM_BATCH] if self._unclaimed(c)]
            if not batch:
                continue
            stop = threading.Event()
            try:
                results = await anyio.to_thread.run_sync(
                    self._rebuild_many,
                    [c.id for c in batch],
                    stop,
                    abandon_on_cancel=True,
                    limiter=self._loads(),
                )
            except BaseException:
                stop.set()  # an abandoned thread stops at its next event
                raise
            for combat, result in zip(batch, results, strict=True):
                if result.unavailable is None and self._unclaimed(combat):
                    await self._claimed(combat, partial(self._settle, combat, result))
                    rebuilt += 1
        log.info(
            "combats_rebuilt",
            combats=rebuilt,
            seconds=round(time.perf_counter() - started, 3),
        )
        # Everything rebuilt is long-lived: keep the cyclic collector from rescanning it. The
        # youngest generations are collected first (a full collection would stall the event
        # loop for as long as it takes to walk every combat: 0.4 s at 100,000).
        gc.collect(1)
        gc.freeze()

    @staticmethod
    def _unclaimed(combat: Combat) -> bool:
        """Whether ``combat`` is neither rebuilt nor being rebuilt: then no command has touched
        its log since the start (each waits for its rebuild first)."""
        return not combat.loaded and combat.loading is None

    async def ready(self, combat_id: str, scope: Scope = None) -> Combat:
        """The combat, rebuilt first if it was not yet; refused if unknown or quarantined. One
        outside ``scope``'s tables is refused as unknown, before anything of it is told."""
        found = await self.find(combat_id, scope)
        await self.load_once(found)
        return usable(found)

    async def find(self, combat_id: str, scope: Scope = None) -> Combat:
        """The combat, rebuilt or not (one another daemon made since this one started is
        looked for in the store); refused as unknown if there is none in ``scope``."""
        if combat_id not in self.combats.by_id and self.shared is not None:
            table = await anyio.to_thread.run_sync(self.shared.locate, combat_id)
            if table is not None and combat_id not in self.combats.by_id:
                if scope is not None and table not in scope:
                    raise unknown_combat(combat_id)
                if not self.combats.has_room():
                    # Known it would stay, as every combat does: the bound holds for all.
                    raise RequestError(
                        "too_many_combats", "at most {limit} combats", "combat", limit=MAX_COMBATS
                    )
                self.combats.add(Combat(combat_id, UNBUILT, 0, loaded=False, table=table))
        found = self.combats.known(combat_id)
        if scope is not None and found.table not in scope:
            raise unknown_combat(combat_id)
        return found

    async def load_once(self, combat: Combat) -> None:
        """Rebuild ``combat`` unless it is: once, however many tasks need it at the same time
        (a command, a read, the clock, ``warm``); the others wait for that one. A rebuild
        cancelled with its task leaves the combat as it was, for the next task to rebuild."""
        while not combat.loaded:
            if combat.loading is not None:
                await combat.loading.wait()
                continue
            await self._claimed(combat, partial(self._load, combat))

    async def _claimed(self, combat: Combat, rebuild: Callable[[], Awaitable[None]]) -> None:
        """Run ``rebuild`` of an unclaimed combat as the one task rebuilding it."""
        combat.loading = done = anyio.Event()
        try:
            await rebuild()
        finally:
            combat.loading = None
            done.set()
            # Rebuilt, its deadline comes from its state; abandoned, from its summary still.
            self.deadlines.moved(combat)

    def _loads(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made on first use: a limiter belongs to a running loop
            self._limiter = anyio.CapacityLimiter(LOAD_THREADS)
        return self._limiter

    async def _load(self, combat: Combat) -> None:
        """Rebuild one combat from its snapshot and the events after it, in a worker thread
        so that a long log never stalls the daemon; a combat that cannot be read is
        quarantined (reported and readable as an error), the others are unaffected. A
        rebuild that replayed a long log stores a snapshot at its end before the combat
        serves, so the next start does not replay it again."""
        if self.shared is not None:
            # Waiting for another daemon to let the combat go is no rebuild: it takes no slot
            # of the rebuilds', which other combats' first uses need meanwhile.
            await anyio.to_thread.run_sync(self.shared.acquire, combat.id, abandon_on_cancel=True)
        rebuilt = await self._rebuilt(combat.id)
        if self.acquired is not None and rebuilt.quarantined is None:
            await self.acquired(combat, rebuilt.state, rebuilt.seq)
        await self._settle(combat, rebuilt)

    async def read_unleased(self, combat_id: str) -> tuple[State, int, str | None]:
        """The combat as its log stands, read without its lease (a combat another daemon
        holds, followed here): its state, its seq and why it is quarantined (None if not)."""
        assert self.shared is not None
        rebuilt = await self._rebuilt(combat_id, self.shared.read_one, leased=False)
        for note in rebuilt.passed_over:
            log.warning("snapshot_unreadable", combat=combat_id, detail=note)
        return rebuilt.state, rebuilt.seq, rebuilt.quarantined

    async def _rebuilt(
        self, combat_id: str, load: Callable[[str], LoadedCombat] | None = None, leased: bool = True
    ) -> _Rebuilt:
        """``_rebuild`` in a worker thread; raises ``store_unavailable`` if it says so."""
        stop = threading.Event()
        try:
            rebuilt = await anyio.to_thread.run_sync(
                self._rebuild,
                combat_id,
                stop,
                load,
                leased,
                abandon_on_cancel=True,
                limiter=self._loads(),
            )
        except BaseException:
            stop.set()  # an abandoned thread stops at its next event
            raise
        if rebuilt.unavailable is not None:
            raise rebuilt.unavailable
        return rebuilt

    def forget(self, combat: Combat) -> None:
        """Have ``combat`` rebuilt from the store before its next use: what it holds in
        memory may no longer be what the store does (a commit of unknown outcome)."""
        combat.summary = summary(combat.state, combat.seq)  # for the clock meanwhile
        combat.loaded = False
        combat.views.clear()
        self.deadlines.moved(combat)

    async def _settle(self, combat: Combat, rebuilt: _Rebuilt) -> None:
        """Make ``combat`` what its rebuild found (event loop), storing a fresh snapshot first
        when the rebuild is worth one."""
        for note in rebuilt.passed_over:
            log.warning("snapshot_unreadable", combat=combat.id, detail=note)
        quarantined = rebuilt.quarantined
        seq, snapshot_seq = rebuilt.seq, rebuilt.snapshot_seq
        # The summary is written in the transaction of the last batch: a log that ends before
        # it lost acknowledged events, and the next command would reuse their seqs.
        claimed = combat.summary.get("seq") if combat.summary is not None else None
        if quarantined is None and isinstance(claimed, int) and claimed > seq:
            quarantined = f"seq {seq + 1} is missing (the last command stored reached {claimed})"
        if quarantined is not None:
            log.error("combat_quarantined", combat=combat.id, reason=quarantined)
        elif rebuilt.fresh:
            # Through the committer like any snapshot, and before any command on the combat
            # (they wait for this rebuild), so it is of the log as it ends; refused otherwise.
            fresh = Batch(
                combat_id=combat.id,
                first_seq=seq + 1,
                events=(),
                ruleset=None,
                request=None,
                response=None,
                at=self.clock(),
                snapshot=partial(to_shared, rebuilt.state),
                summary=summary(rebuilt.state, seq),
                epoch=rebuilt.epoch,
            )
            try:
                await self.store.commit(fresh)
            except StoreError as e:  # only the next start pays: it replays this log again
                log.warning("snapshot_not_stored", combat=combat.id, seq=seq, reason=str(e))
            else:
                snapshot_seq = seq
                log.info("snapshot_stored", combat=combat.id, seq=seq)
        combat.state = rebuilt.state
        combat.seq = seq
        combat.epoch = rebuilt.epoch
        combat.snapshot_seq = snapshot_seq
        combat.quarantined = quarantined
        combat.loaded = True
        combat.summary = None

    def _rebuild_many(self, combat_ids: list[str], stop: threading.Event) -> list[_Rebuilt]:
        """``_rebuild`` of each combat in turn (worker thread), offering the GIL to the event
        loop's thread between two. Raises ``_AbandonedError`` once ``stop`` is set."""
        rebuilt = []
        for combat_id in combat_ids:
            if stop.is_set():
                raise _AbandonedError
            rebuilt.append(self._rebuild(combat_id, stop))
            time.sleep(0)
        return rebuilt

    def _rebuild(
        self,
        combat_id: str,
        stop: threading.Event,
        load: Callable[[str], LoadedCombat] | None = None,
        leased: bool = True,
    ) -> _Rebuilt:
        """``_load``'s work, in a worker thread: the stored snapshot (passed over if it does
        not decode or miscounts its log), then the events after it, streamed from the store.
        ``fresh`` is set when the stored snapshot was passed over or the replay was as long as
        ``snapshot_every``. Raises ``_AbandonedError`` once ``stop`` is set."""
        # A rebuild makes many long-lived objects and frees few: the cyclic collector would
        # only rescan them.
        gc.disable()
        try:
            # The store's own load (its lease taken), unless told otherwise (``read_unleased``).
            loaded = (load or self.store.load_one)(combat_id)
        except StoreError as e:
            if e.code in ("store_unavailable", "combat_moved"):
                return _Rebuilt(State(), 0, 0, unavailable=e)
            log.exception("combat_quarantined", combat=combat_id)
            return _Rebuilt(State(), 0, 0, f"its stored log could not be read: {e}")
        except Exception as e:  # an unreadable combat is quarantined alone
            log.exception("combat_quarantined", combat=combat_id)
            return _Rebuilt(State(), 0, 0, f"its stored log could not be read: {e}")
        finally:
            gc.enable()
        notes = list(loaded.warnings)
        if loaded.quarantined is not None:
            return _Rebuilt(State(), 0, 0, loaded.quarantined, passed_over=tuple(notes))
        state = State()
        seq = 0
        if loaded.snapshot is not None:
            seq, body = loaded.snapshot
            problem: str | None = None
            try:
                state = from_shared(State, body)
            except Exception as e:  # a snapshot is only a shortcut: the log is the record
                problem = f"does not decode ({e})"
            else:
                # The state tells what was hidden at which seq (R16): a snapshot that miscounts
                # its log (one written before states counted) would judge events by the wrong
                # moment, so the log is replayed instead.
                if state.seq != seq:
                    problem = f"counts {state.seq} events"
            if problem is not None:
                notes.append(f"snapshot at seq {seq} {problem}, replaying the log")
                state = State()
                seq = 0
        snapshot_seq = seq
        try:
            for n, body in self.store.replay(combat_id, seq):
                if n > loaded.last and not leased:
                    break  # its holder appends as it is read: a follower reads on from here
                if n > loaded.last:
                    # Appended since the load counted the log: on a shared store, by a daemon
                    # that took the combat over meanwhile (this one paused past its lease, or
                    # let it go). Served as read, it would be refused (``conflict``) or decide
                    # on a stale state: left unloaded instead, for the next request to read.
                    moved = StoreError(
                        "combat_moved",
                        "combat {id!r} moved to another daemon: retry with the same request_id",
                        "combat",
                        id=combat_id,
                    )
                    return _Rebuilt(State(), 0, 0, unavailable=moved, passed_over=tuple(notes))
                if stop.is_set():
                    raise _AbandonedError
                if n % REBUILD_YIELD_EVENTS == 0:
                    time.sleep(0)  # hands the GIL to the event loop's thread if it waits
                try:
                    state = evolve(state, event_from_plain(body))
                except Exception as e:  # any failure to replay quarantines the combat
                    return _Rebuilt(
                        State(), 0, 0, f"replay failed at event {n}: {e}", passed_over=tuple(notes)
                    )
                seq = n
        except StoreError as e:  # an unreadable or missing event: this combat alone
            if e.code == "store_unavailable":
                return _Rebuilt(State(), 0, 0, unavailable=e)
            return _Rebuilt(State(), 0, 0, e.message, passed_over=tuple(notes))
        if seq != loaded.last:  # rows removed behind the rebuild (another process on the file)
            missing = f"seq {seq + 1} is missing (the log reached {loaded.last})"
            return _Rebuilt(State(), 0, 0, missing, passed_over=tuple(notes))
        long_replay = seq - snapshot_seq >= self.snapshot_every
        return _Rebuilt(
            state,
            seq,
            snapshot_seq,
            epoch=loaded.epoch,
            fresh=seq > 0 and (bool(notes) or long_replay),
            passed_over=tuple(notes),
        )
