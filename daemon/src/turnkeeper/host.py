"""The combats a daemon holds: one writer per combat, durable before acknowledged.

A command takes the write pipeline every host shares (``turnkeeper_engine.pipeline``): request
→ room for its hooks → plugins' before hooks → engine → events committed (group commit) →
subscribers → reply → plugins' hooks, in the background, in each combat's event order. Once a
command is committed nothing waits on a plugin before its reply. The hub supplies the
pipeline's ports: ``_CombatLog`` puts the store behind ``commit``, the subscribers behind
``publish`` and the hook workers behind ``due``; the plugin host is its ``hooks`` only when a
loaded plugin has a hook called per command.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import hashlib
import heapq
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import anyio
import structlog

from turnkeeper_engine import (
    BUNDLED_RULES,
    Actor,
    DiceSource,
    RuleBook,
    RuleError,
    State,
    SystemDice,
    evolve,
    next_deadline,
    view,
    visible,
)
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine.errors import Arg, TemplatedError
from turnkeeper_engine.pipeline import Applied, Pipeline, RefusedError
from turnkeeper_engine.plain import (
    Plain,
    command_to_plain,
    event_from_plain,
    event_to_plain,
    from_shared,
    to_plain,
    to_shared,
)
from turnkeeper_sdk import wire
from turnkeeper_sdk.plugins import PluginHost

from .narrate import narrate
from .store import Batch, Store, StoreError

log = structlog.get_logger("turnkeeper.host")

MAX_CATCH_UP = 1000
"""Missed events a subscription replays before going live; further behind, a client reads the
combat's state and history first (``too_far_behind``), so no outbox ever holds a whole log."""

MAX_COMBATS = 100_000
"""Combats one daemon holds (ended ones included): at about 10 KiB each, a bound of a few GiB
of memory, far above what any group of tables plays."""

MAX_COMBAT_PAGE = 500
"""Most combats one ``list_combats`` page or ``subscribe_all`` answer names. Its longest rows
(an id of 128 four-byte characters, a ruleset name as long, or a quarantine reason cut to
``MAX_REASON_CHARS``) take under 1.4 KiB each, so a page stays far inside the message limit."""

MAX_REASON_CHARS = 200
"""Longest quarantine reason a ``list_combats`` row shows; the daemon's log has it whole."""

SNAPSHOT_EVERY = 1000
"""Events between two snapshots of a combat: start-up replays at most this many per combat,
and a snapshot (the state with its undo history, shared parts stored once) stays cheap."""

LOAD_THREADS = 2
"""Combats rebuilt at once, each in a worker thread of the hub's own: a combat with a long log
to replay (an upgrade's first start) leaves room for another's first use, and rebuilds never
take the threads the store's committer needs."""

REBUILD_YIELD_EVENTS = 100
"""Events a rebuild replays between two offers of the GIL to the event loop's thread (a few
milliseconds of work): left to the interpreter's switch interval, each of the many hand-overs
one request needs would wait up to 5 ms behind the rebuild."""

CLOCK_RETRY_SECONDS = 1.0
"""After a failed tick the clock waits this long before trying again."""

MAX_CLOCK_EVENTS_PER_SECOND = 10.0
"""Events the clock's ticks may record for one combat per second, on average. A turn at the
shortest limit (1 s, R13) costs about five; a combat whose deadlines come faster (a turn limit
recorded before that minimum) would otherwise write thousands a second. After a tick that
recorded n events the combat's next tick waits n / this many seconds: a deadline due meanwhile
is deferred, never dropped, and that tick applies it (and all else due) late."""

CLOCK_HEAP_SLACK = 1024
"""Outdated entries the clock's heap may hold beyond one per combat before it is rebuilt from
the live ones: a deadline that moves leaves its old entry behind (dropped when it comes up), and
a deadline moved later again and again would otherwise grow the heap with every command."""

CLOCK_ACTOR = Actor("narrator", None, "clock")
"""The daemon's own clock acts as narrator when it lets time pass (R13)."""

HOOK_WORKERS = 4
"""Tasks running plugin hooks, each for the combats whose id hashes to it: a combat's hooks run
one command after another, in event order, while other combats' hooks go on beside them. A
worker's combats take turns, one command's hooks each, so a combat with a long backlog does not
hold up the hooks of the others."""

HOOK_QUEUE = 256
"""Commands of clients and the clock whose hooks have not run yet, per worker (the commands
plugins cause come on top, bounded by ``plugins.MAX_CAUSED`` each). When it is full a client's
next command waits for room before it is committed (never after: a committed command is
answered at once), so a client whose commands outrun the plugins is slowed down instead of the
daemon's memory growing. The clock cannot wait: its command then runs no hooks (logged as
``plugin_hooks_skipped``)."""

HOOK_QUEUE_PER_COMBAT = 32
"""Places in its worker's ``HOOK_QUEUE`` one combat's commands may hold: a client that outruns
its combat's plugins waits on that combat's own backlog, while the clients of the worker's other
combats find room (unless eight combats are that far behind at once). The clock's commands
count here too, but never wait for it."""


GC_YOUNG = 20_000
"""Net allocations of objects the cyclic collector tracks between two collections of its
youngest generation (the interpreter's default is 700). A command makes a few hundred and frees
nearly all of them by reference counting, states being trees: at 700 the collector runs every
few commands, and each run promotes whatever is alive at that instant towards the generations
whose collections walk every resident combat. At 20,000 it runs about 25 times less often
(measured in process: 0.6 µs of collection per command instead of 6.5), for a few megabytes
of cyclic garbage kept a little longer."""


def tune_collector() -> None:
    """Set the process's cyclic garbage collector for a daemon. Process-wide, so called once by
    the program that serves (``turnkeeper serve``), never by a hub, which tests make many of.
    ``Hub.warm`` freezes what start-up rebuilt, which only ever lives long."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, middle, oldest)


class RequestError(TemplatedError):
    """A refused request, as the protocol reports it: ``code``, ``message``, ``field``.

    ``template`` is a string literal (the message catalogue is extracted from the source), its
    pieces passed by name: ``RequestError("unknown_combat", "no combat {id!r}", "combat",
    id=combat_id)``. ``message`` is the English text; ``turnkeeper.i18n`` translates.
    """

    def __init__(self, code: str, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(template, args)
        self.code = code
        self.field = field

    @classmethod
    def relay(cls, error: RuleError | TemplatedError, code: str, field: str = "") -> RequestError:
        """Another layer's error (the engine's, the store's, a decoding error) as a request's,
        with its template and arguments, so it is translated like any."""
        return cls(code, error.template, field, **dict(error.args))


class Subscriber(Protocol):
    """A connection's side of a subscription."""

    actor: Actor
    narration: str | None
    """The locale this subscriber's events are told in (their ``summary``), or None for none."""

    def deliver(self, data: bytes) -> bool:
        """Queue one packed ``event`` notification; False when the subscriber cannot keep up
        (it is then dropped)."""
        ...

    def room(self) -> int:
        """How many more messages can be queued right now."""
        ...


@dataclass(slots=True)
class Combat:
    id: str
    state: State
    seq: int
    snapshot_seq: int = 0
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    quarantined: str | None = None
    subscribers: set[Subscriber] = field(default_factory=set)
    views: dict[tuple[str, str | None], Plain] = field(default_factory=dict)
    """Encoded views of the state at ``seq``, by who may see what: reads outnumber writes."""
    views_seq: int = -1
    loaded: bool = True
    """False while only the stored summary is known (see ``Hub.recover``)."""
    loading: anyio.Event | None = None
    """Set while a task rebuilds the combat: the others that need it wait for that one."""
    summary: dict[str, Plain] | None = None
    clock_after: float = 0.0
    """The clock ticks this combat no earlier than this (``MAX_CLOCK_EVENTS_PER_SECOND``)."""
    clock_due: float | None = None
    """When the clock's heap holds this combat due (its next deadline, not before
    ``clock_after``), or None when it is not on the heap."""
    clock_ticket: int = 0
    """The ticket of this combat's one live entry on the clock's heap: entries with another
    are outdated, and dropped when they come up."""
    hooks_due: deque[tuple[Applied, bool]] = field(default_factory=deque)
    """Committed commands whose plugin hooks have not run yet, in commit order, each with
    whether it holds a place in its worker's ``HOOK_QUEUE`` (a client's command does). The
    combat is on its worker's list while any are due; the worker runs them oldest first."""
    places: int = 0
    """Places this combat's commands hold in its worker's ``HOOK_QUEUE``
    (``HOOK_QUEUE_PER_COMBAT``)."""


class _AbandonedError(Exception):
    """The task that wanted a rebuild was cancelled: its worker thread stops reading."""


@dataclass(frozen=True)
class _Rebuilt:
    """What a rebuild (in a worker thread) found: the state at ``seq``, and ``fresh``, whether
    that state is worth a new snapshot (see ``Hub._rebuild``)."""

    state: State
    seq: int
    snapshot_seq: int
    quarantined: str | None = None
    fresh: bool = False


_UNBUILT = State()
"""The state of every combat known only from its summary (states are immutable, so one serves
them all): a hundred thousand combats start without a hundred thousand empty states."""


def _summary(state: State, seq: int) -> dict[str, Plain]:
    """What start-up needs of a combat before rebuilding it (``Store.summaries``)."""
    return {
        "ruleset": state.ruleset,
        "phase": state.phase,
        "round": state.round,
        "seq": seq,
        "deadline": next_deadline(state),
    }


@dataclass(slots=True, eq=False)
class _Ticket:
    """What the hub attaches to one command of a client or the clock on its way through the
    pipeline (a plugin's command has none)."""

    request: tuple[str, str] | None = None
    """(principal, request_id): remembered with the result, for retries."""
    fingerprint: str = ""
    ruleset: str | None = None
    """A new combat's ruleset, stored with its row."""
    observe: bool = False
    """Whether the command's hooks are due once it commits."""
    placed: bool = False
    """Whether it holds a place in its hook worker's ``HOOK_QUEUE``."""
    queued: bool = False
    """Set once it is on its combat's list of hooks due (holding its place, if placed)."""
    result: Plain = None
    """The result its caller gets, set as it commits."""


FINGERPRINT_BYTES = 16
"""Digest size of a request's fingerprint: 128 bits, so no two commands one principal sends
share one by chance. Half the 32 bytes of ``_fingerprint_v1``, so the two never look alike."""


def _fingerprint(combat_id: str, actor: Actor, command: cmd.Command) -> str:
    """What a request id stands for, so a reused id with another command (or, from a bridge,
    for another user) is caught. A command is a frozen dataclass of plain values, nested ones
    included, whose ``repr`` names every field (``tests/test_hub.py`` keeps it so): digested as
    it is, with no encoding to plain data and JSON first, it costs a third to a sixth of
    ``_fingerprint_v1`` (6 µs against 35 for an ``end_turn``)."""
    body = repr((combat_id, actor.role, actor.user, actor.via, command))
    return hashlib.blake2b(body.encode(), digest_size=FINGERPRINT_BYTES).hexdigest()


def _fingerprint_v1(combat_id: str, actor: Actor, command: cmd.Command) -> str:
    """The fingerprint daemons before this one stored: a retry they remembered, answered after
    an upgrade, is recognised by it."""
    who = [actor.role, actor.user, actor.via]
    body = json.dumps([combat_id, who, command_to_plain(command)], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _same_request(known: object, combat_id: str, actor: Actor, command: cmd.Command) -> bool:
    """Whether a remembered fingerprint (``known``) stands for this request."""
    if known == _fingerprint(combat_id, actor, command):
        return True
    legacy = isinstance(known, str) and len(known) == 2 * hashlib.sha256().digest_size
    return legacy and known == _fingerprint_v1(combat_id, actor, command)


def _audience(actor: Actor) -> tuple[str, str | None]:
    """Actors who see exactly the same events and views (R16 depends on role and user only)."""
    return ("narrator", None) if actor.role == "narrator" else (actor.role, actor.user)


def _telling(state: State, actor: Actor) -> State:
    """The state a line for ``actor`` is told against: it lends names, and whether a turn is
    under way. Both come from what the actor may see now (R16): a hidden combatant's turn is
    none, and a combatant hidden now lends no name, not even to an event of a visible one
    that had its id before an undo (that line shows the id)."""
    if actor.role == "narrator":
        return state
    seen = view(state, actor)
    return dataclasses.replace(state, turn=seen.turn, combatants=seen.combatants)


def _numbered(
    events: list[tuple[int, ev.Event]],
    state: State,
    actor: Actor,
    plains: list[dict[str, Plain]] | None = None,
    locale: str | None = None,
    *,
    rules: RuleBook,
) -> list[Plain]:
    """Events as ``actor`` may see them, each with its sequence number, judged by what was
    hidden when each happened, not by ``state``, the latest (R16). ``plains`` are
    the events already encoded, reused wherever the actor sees an event unchanged. With a
    ``locale``, each carries its ``summary``, told from the event as the actor sees it, so a
    line never names what the event left out."""
    told = _telling(state, actor) if locale is not None else state
    shown: list[Plain] = []
    for i, (seq, event) in enumerate(events):
        seen = visible(event, state, actor, seq)
        if seen is not None:
            body = plains[i] if plains is not None and seen is event else event_to_plain(seen)
            item: dict[str, Plain] = {"seq": seq, **body}
            if locale is not None:
                item["summary"] = narrate(seen, told, locale, rules=rules)
            shown.append(item)
    return shown


def _packed(combat_id: str, shown: list[Plain]) -> list[bytes]:
    packed = []
    for item in shown:
        assert isinstance(item, dict)
        packed.append(wire.pack(wire.Notification("event", {"combat": combat_id, **item})))
    return packed


def _unchanged(combat: Combat) -> Plain:
    """The result of a command that changed nothing (a tick with nothing due)."""
    return {"combat": combat.id, "seq": combat.seq, "events": []}


class _CombatLog:
    """One combat as the pipeline's port: the hub's store behind ``commit``, its subscribers
    behind ``publish``, its hook workers behind ``due``."""

    __slots__ = ("_combat", "_hub", "_numbered", "_plains")

    def __init__(self, hub: Hub, combat: Combat) -> None:
        self._hub = hub
        self._combat = combat
        self._numbered: list[tuple[int, ev.Event]] = []
        self._plains: list[dict[str, Plain]] = []

    @property
    def state(self) -> State:
        return self._combat.state

    @property
    def seq(self) -> int:
        return self._combat.seq

    def writing(self) -> anyio.Lock:
        return self._combat.lock

    async def commit(self, applied: Applied, ticket: _Ticket | None) -> None:
        """Durable before anything else sees it: one batch for the store's group commit, with
        the caller's result when it came with a request id (retries get it back)."""
        hub, combat = self._hub, self._combat
        numbered = list(enumerate(applied.events, start=applied.first))
        plains = [event_to_plain(e) for e in applied.events]
        last = applied.seq
        state = applied.after
        snapshot = last - combat.snapshot_seq >= hub.snapshot_every
        request = ticket.request if ticket is not None else None
        response: Plain = None
        remembered: Plain = None
        if ticket is not None and request is not None:
            # Only a client's command has a caller to answer, now and on a retry.
            shown = _numbered(numbered, state, applied.actor, plains, rules=hub.rules)
            response = {"combat": combat.id, "seq": last, "events": shown}
            remembered = {"fingerprint": ticket.fingerprint, "result": response}
        batch = Batch(
            combat_id=combat.id,
            first_seq=applied.first,
            events=tuple(plains),
            ruleset=ticket.ruleset if ticket is not None else None,
            request=request,
            response=remembered,
            at=applied.now,
            snapshot=partial(to_shared, state) if snapshot else None,
            summary=_summary(state, last),
        )
        try:
            await hub.store.commit(batch)
        except StoreError as e:
            raise RefusedError.relay(e, e.code) from e
        combat.state = state
        combat.seq = last
        if snapshot:
            combat.snapshot_seq = last
        hub._deadline_moved(combat)
        if ticket is not None:
            ticket.result = response
        self._numbered, self._plains = numbered, plains

    def publish(self, applied: Applied) -> None:
        self._hub._publish(self._combat, self._numbered, self._plains)

    def due(self, applied: Applied, ticket: _Ticket | None) -> None:
        """On the combat's list of hooks due, under the writer's lock, so in commit order: a
        plugin's command always, a client's or the clock's when it has room."""
        if ticket is None:
            self._combat.hooks_due.append((applied, False))
        elif ticket.observe:
            self._combat.hooks_due.append((applied, ticket.placed))
            ticket.queued = True


class Hub:
    """Every combat of one daemon, its store, its dice, its rule book and its clock. The rule
    book is ``rules`` if given, else the plugin host's (the bundled rules and what the plugins
    added), else the bundled rules."""

    def __init__(
        self,
        store: Store,
        dice: DiceSource | None = None,
        clock: Callable[[], float] = time.time,
        snapshot_every: int = SNAPSHOT_EVERY,
        plugins: PluginHost | None = None,
        rules: RuleBook | None = None,
    ) -> None:
        self.store = store
        self.plugins = plugins
        """Plugins' hooks run only while ``run_hooks`` runs."""
        self.snapshot_every = snapshot_every
        self.dice: DiceSource = dice or SystemDice()
        self.rules: RuleBook = (
            rules if rules is not None else plugins.rules if plugins is not None else BUNDLED_RULES
        )
        """What ``decide``, the plugins' views and narration play by."""
        self.clock = clock
        hooks = plugins if plugins is not None and plugins.per_command else None
        self.pipeline: Pipeline[_Ticket] = Pipeline(self.dice, clock, hooks, rules=self.rules)
        """Every command's way through: before hooks, engine, store, subscribers, hooks due
        (with no hook plumbing at all when no loaded plugin needs it)."""
        self.combats: dict[str, Combat] = {}
        self.ids: list[str] = []
        """Every combat's id, sorted: pages of combats are read from it by id (code points)."""
        self.everywhere: set[Subscriber] = set()
        self._following: dict[Subscriber, set[str]] = {}
        """The combats each subscriber follows (``subscribe``), so that a disconnect leaves
        them without a walk over every combat; an entry per subscriber that follows any."""
        self._creating = anyio.Lock()
        self._in_flight: dict[tuple[str, str], anyio.Event] = {}
        self._wake = anyio.Event()
        self._deadlines: list[tuple[float, int, Combat]] = []
        """The clock's heap: (due, ticket, combat), the live entry of a combat being the one
        whose ticket it holds (``Combat.clock_ticket``); at most one live entry per combat."""
        self._tickets = itertools.count(1)
        self._clock_sleeps_until = -math.inf
        """The due time the clock sleeps until; -inf while it is not asleep (it reads the
        heap before it sleeps again)."""
        self._workers = HOOK_WORKERS
        self._ready: list[dict[str, Combat]] = [{} for _ in range(self._workers)]
        """Combats with hooks due, by worker, oldest first: one entry per combat, so bounded
        like the combats themselves."""
        self._ready_wake = [anyio.Event() for _ in range(self._workers)]
        self._places = [0] * self._workers
        """Places taken in each worker's ``HOOK_QUEUE``."""
        self._room = [anyio.Event() for _ in range(self._workers)]
        self._hooks_stopped = False
        """Set once the workers stop: nobody waits for room any more."""
        self._limiter: anyio.CapacityLimiter | None = None
        """Worker threads for rebuilds (``LOAD_THREADS``)."""

    # --------------------------------------------------------------------------- recovery

    async def recover(self) -> None:
        """Know every combat at once from its stored summary, so the daemon serves right away;
        a combat without one is rebuilt now. The others are rebuilt by ``warm`` behind the
        daemon's back, or on first use, whichever comes first. Call with the store running: a
        rebuild may store a fresh snapshot."""
        for combat_id, summary in self.store.summaries():
            if isinstance(summary, dict) and isinstance(summary.get("seq"), int):
                self.combats[combat_id] = Combat(
                    combat_id, _UNBUILT, summary["seq"], loaded=False, summary=summary
                )
            else:
                combat = Combat(combat_id, State(), 0, loaded=False)
                await self._load_once(combat)
                self.combats[combat_id] = combat
        self.ids = sorted(self.combats)
        for combat in self.combats.values():
            self._deadline_moved(combat)

    async def warm(self) -> None:
        """Rebuild every combat not yet rebuilt, one at a time, while requests are served."""
        started = time.perf_counter()
        rebuilt = 0
        for combat in list(self.combats.values()):
            if not combat.loaded:
                await self._load_once(combat)
                rebuilt += 1
        log.info(
            "combats_rebuilt",
            combats=rebuilt,
            seconds=round(time.perf_counter() - started, 3),
        )
        # Everything rebuilt is long-lived: keep the cyclic collector from rescanning it.
        gc.collect()
        gc.freeze()

    async def _load_once(self, combat: Combat) -> None:
        """Rebuild ``combat`` unless it is: once, however many tasks need it at the same time
        (a command, a read, the clock, ``warm``); the others wait for that one. A rebuild
        cancelled with its task leaves the combat as it was, for the next task to rebuild."""
        while not combat.loaded:
            if combat.loading is not None:
                await combat.loading.wait()
                continue
            combat.loading = done = anyio.Event()
            try:
                await self._load(combat)
            finally:
                combat.loading = None
                done.set()
                # Rebuilt, its deadline comes from its state; abandoned, from its summary still.
                self._deadline_moved(combat)

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
        stop = threading.Event()
        try:
            rebuilt = await anyio.to_thread.run_sync(
                self._rebuild, combat.id, stop, abandon_on_cancel=True, limiter=self._loads()
            )
        except BaseException:
            stop.set()  # an abandoned thread stops at its next event
            raise
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
                summary=_summary(rebuilt.state, seq),
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
        combat.snapshot_seq = snapshot_seq
        combat.quarantined = quarantined
        combat.loaded = True
        combat.summary = None

    def _rebuild(self, combat_id: str, stop: threading.Event) -> _Rebuilt:
        """``_load``'s work, in a worker thread: the stored snapshot (passed over if it does
        not decode or miscounts its log), then the events after it, streamed from the store.
        ``fresh`` is set when the stored snapshot was passed over or the replay was as long as
        ``snapshot_every``. Raises ``_AbandonedError`` once ``stop`` is set."""
        # A rebuild makes many long-lived objects and frees few: the cyclic collector would
        # only rescan them.
        gc.disable()
        try:
            loaded = self.store.load_one(combat_id)
        except Exception as e:  # an unreadable combat is quarantined alone
            log.exception("combat_quarantined", combat=combat_id)
            return _Rebuilt(State(), 0, 0, f"its stored log could not be read: {e}")
        finally:
            gc.enable()
        for warning in loaded.warnings:
            log.warning("snapshot_unreadable", combat=combat_id, detail=warning)
        if loaded.quarantined is not None:
            return _Rebuilt(State(), 0, 0, loaded.quarantined)
        state = State()
        seq = 0
        passed_over = bool(loaded.warnings)
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
                log.warning(
                    "snapshot_unreadable",
                    combat=combat_id,
                    detail=f"snapshot at seq {seq} {problem}, replaying the log",
                )
                state = State()
                seq = 0
                passed_over = True
        snapshot_seq = seq
        try:
            for n, body in self.store.replay(combat_id, seq):
                if stop.is_set():
                    raise _AbandonedError
                if n % REBUILD_YIELD_EVENTS == 0:
                    time.sleep(0)  # hands the GIL to the event loop's thread if it waits
                try:
                    state = evolve(state, event_from_plain(body))
                except Exception as e:  # any failure to replay quarantines the combat
                    return _Rebuilt(State(), 0, 0, f"replay failed at event {n}: {e}")
                seq = n
        except StoreError as e:  # an unreadable or missing event: this combat alone
            return _Rebuilt(State(), 0, 0, e.message)
        if seq != loaded.last:  # rows removed behind the rebuild (another process on the file)
            return _Rebuilt(
                State(), 0, 0, f"seq {seq + 1} is missing (the log reached {loaded.last})"
            )
        long_replay = seq - snapshot_seq >= self.snapshot_every
        return _Rebuilt(state, seq, snapshot_seq, fresh=seq > 0 and (passed_over or long_replay))

    # --------------------------------------------------------------------------- commands

    async def combat(self, combat_id: str) -> Combat:
        """The combat, rebuilt first if it was not yet; refused if unknown or quarantined."""
        found = self.combats.get(combat_id)
        if found is None:
            raise RequestError("unknown_combat", "no combat {id!r}", "combat", id=combat_id)
        await self._load_once(found)
        if found.quarantined is not None:
            # The reason is a diagnostic (what failed to decode, and how): told as it is.
            raise RequestError("combat_quarantined", "{reason}", "combat", reason=found.quarantined)
        return found

    def _quarantine(self, combat: Combat, error: StoreError) -> RequestError:
        """Quarantine a served combat whose stored log turned out unreadable where a read
        reached it (history, a catch-up): its answer is the refusal to raise."""
        combat.quarantined = error.message
        self._deadline_moved(combat)
        log.error("combat_quarantined", combat=combat.id, reason=error.message)
        return RequestError("combat_quarantined", "{reason}", "combat", reason=error.message)

    async def execute(
        self,
        principal: str,
        actor: Actor,
        combat_id: str,
        command: cmd.Command,
        request_id: str,
    ) -> Plain:
        """Apply a command once. A retried ``request_id`` gets the first result back, also
        across a restart, and is never applied twice."""
        key = (principal, request_id)
        while key in self._in_flight:
            await self._in_flight[key].wait()
        # In flight from here: the lookup may wait for a database read, and a retry arriving
        # meanwhile must wait for this one's answer, not run beside it.
        done = anyio.Event()
        self._in_flight[key] = done
        try:
            remembered = await self.store.lookup_request(principal, request_id)
            if remembered is not None:
                stored = remembered[1]
                if not _same_request(stored.get("fingerprint"), combat_id, actor, command):
                    raise RequestError(
                        "request_id_reused",
                        "this request_id was used for a different command",
                        "request_id",
                    )
                return stored["result"]  # type: ignore[no-any-return]
            ticket = _Ticket(key, _fingerprint(combat_id, actor, command))
            return await self._execute(ticket, actor, combat_id, command)
        finally:
            del self._in_flight[key]
            done.set()

    async def _execute(
        self, ticket: _Ticket, actor: Actor, combat_id: str, command: cmd.Command
    ) -> Plain:
        if isinstance(command, cmd.CreateCombat):
            async with self._creating:
                if combat_id in self.combats:
                    raise RequestError(
                        "combat_exists", "combat {id!r} exists", "combat_id", id=combat_id
                    )
                if len(self.combats) >= MAX_COMBATS:
                    raise RequestError(
                        "too_many_combats",
                        "at most {limit} combats",
                        "combat_id",
                        limit=MAX_COMBATS,
                    )
                combat = Combat(combat_id, State(), 0)
                ticket.ruleset = command.ruleset
                result = await self._run(combat, ticket, actor, command)
                self.combats[combat_id] = combat
                bisect.insort(self.ids, combat_id)
                return result
        return await self._run(await self.combat(combat_id), ticket, actor, command)

    async def _run(
        self, combat: Combat, ticket: _Ticket | None, actor: Actor, command: cmd.Command
    ) -> Plain:
        """A client's command (its ``ticket``) or the clock's (None) through the pipeline. With
        plugins, room for its hooks first (a client waits for it; the clock never does, and goes
        without hooks when there is none); its hooks and those of all it committed are handed
        to the background, in commit order. No lock is held while a hook runs or a client waits
        for room, and nothing waits once the command is committed."""
        clock = ticket is None
        ticket = ticket or _Ticket()
        shard = hash(combat.id) % self._workers
        if self.pipeline.hooks is not None:
            await self._make_room(ticket, clock, command, combat, shard)
        try:
            applied = await self.pipeline.run(_CombatLog(self, combat), actor, command, ticket)
        except RefusedError as e:
            raise RequestError.relay(e, e.code, e.field) from e
        finally:
            if ticket.placed and not ticket.queued:
                self._free_place(shard, combat)
            # Even when the command itself is refused, what its before hooks applied has hooks.
            if combat.hooks_due:
                self._hooks_ready(combat, shard)
        return ticket.result if applied is not None else _unchanged(combat)

    async def _make_room(
        self, ticket: _Ticket, clock: bool, command: cmd.Command, combat: Combat, shard: int
    ) -> None:
        """A place in the worker's ``HOOK_QUEUE`` for the command's hooks, taken before it is
        decided: a client waits for one; the clock takes one only if there is room."""
        if clock:
            ticket.placed = ticket.observe = self._places[shard] < HOOK_QUEUE
            if ticket.placed:
                self._places[shard] += 1
                combat.places += 1
            else:
                # The clock cannot wait, and the queue must stay bounded: plugins that are
                # this far behind miss the hooks of this tick.
                log.warning("plugin_hooks_skipped", combat=combat.id, command=command.name)
        else:
            # No hook stands for a combat's creation.
            ticket.observe = not isinstance(command, cmd.CreateCombat)
            ticket.placed = ticket.observe and await self._take_place(shard, combat)

    async def _take_place(self, shard: int, combat: Combat) -> bool:
        """Wait for room in a worker's ``HOOK_QUEUE``, and in the combat's share of it, and
        take a place: False when the workers have stopped (the daemon is stopping), and hooks
        due then are not run."""
        while self._places[shard] >= HOOK_QUEUE or combat.places >= HOOK_QUEUE_PER_COMBAT:
            if self._hooks_stopped:
                return False
            await self._room[shard].wait()
        self._places[shard] += 1
        combat.places += 1
        return True

    def _free_place(self, shard: int, combat: Combat) -> None:
        self._places[shard] -= 1
        combat.places -= 1
        self._room[shard].set()
        self._room[shard] = anyio.Event()

    def _hooks_ready(self, combat: Combat, shard: int) -> None:
        """Put a combat with hooks due on its worker's list; never waits."""
        self._ready[shard].setdefault(combat.id, combat)
        self._ready_wake[shard].set()

    async def run_hooks(self) -> None:
        """Run plugins' hooks for committed commands until cancelled, one worker per share of
        the combats; then clients waiting for room go on without."""
        try:
            async with anyio.create_task_group() as tg:
                for shard in range(self._workers):
                    tg.start_soon(self._hook_worker, shard)
        finally:
            self._hooks_stopped = True
            for room in self._room:
                room.set()

    async def _hook_worker(self, shard: int) -> None:
        ready = self._ready[shard]
        while True:
            while not ready:
                self._ready_wake[shard] = anyio.Event()
                await self._ready_wake[shard].wait()
            combat = ready.pop(next(iter(ready)))
            await self._run_due(combat, shard)
            if combat.hooks_due:
                # To the back of the list: the worker's combats take turns.
                self._hooks_ready(combat, shard)

    async def _run_due(self, combat: Combat, shard: int) -> None:
        """The hooks of a combat's oldest command due: the commands plugins cause join the
        same list as they commit, so the order holds."""
        applied, placed = combat.hooks_due.popleft()
        try:
            await self.pipeline.react(_CombatLog(self, combat), applied)
        except Exception:
            # The host isolates each plugin already: this is the daemon's own failure. That
            # command's hooks are lost; the worker goes on.
            log.exception("plugin_hooks_failed", combat=combat.id, seq=applied.seq)
        finally:
            if placed:
                self._free_place(shard, combat)

    def _publish(
        self,
        combat: Combat,
        numbered: list[tuple[int, ev.Event]],
        plains: list[dict[str, Plain]],
    ) -> None:
        # Filtered and packed once per audience, however many subscribers it has.
        packed: dict[tuple[str, str | None, str | None], list[bytes] | None] = {}
        for subscriber in [*combat.subscribers, *self.everywhere]:
            audience = (*_audience(subscriber.actor), subscriber.narration)
            if audience not in packed:
                try:
                    shown = _numbered(
                        numbered,
                        combat.state,
                        subscriber.actor,
                        plains,
                        subscriber.narration,
                        rules=self.rules,
                    )
                    packed[audience] = _packed(combat.id, shown)
                except Exception:
                    log.exception("publish_failed", combat=combat.id, audience=audience)
                    packed[audience] = None
            ready = packed[audience]
            if ready is None:
                # The command is committed; every subscriber its events cannot be shown to
                # loses its subscription rather than receive a gap.
                combat.subscribers.discard(subscriber)
                self.everywhere.discard(subscriber)
                continue
            for data in ready:
                if not subscriber.deliver(data):
                    combat.subscribers.discard(subscriber)
                    self.everywhere.discard(subscriber)
                    break

    # ----------------------------------------------------------------------------- queries

    async def view(self, combat_id: str, actor: Actor) -> Plain:
        combat = await self.combat(combat_id)
        if combat.views_seq != combat.seq:
            combat.views.clear()
            combat.views_seq = combat.seq
        audience = _audience(actor)
        if audience not in combat.views:
            seen = to_plain(view(combat.state, actor))
            combat.views[audience] = {"combat": combat.id, "seq": combat.seq, "view": seen}
        return combat.views[audience]

    async def history(
        self, combat_id: str, actor: Actor, after: int, limit: int, locale: str | None = None
    ) -> Plain:
        combat = await self.combat(combat_id)
        try:
            stored = self.store.events_after(combat.id, after, limit)
        except StoreError as e:
            raise self._quarantine(combat, e) from e
        events = [(seq, event_from_plain(body)) for seq, body in stored]
        return {
            "combat": combat.id,
            "seq": combat.seq,
            # The last seq this page read: a page can show fewer events than it read (R16),
            # so the next page starts after ``until``, not after the last event shown.
            "until": stored[-1][0] if stored else after,
            "events": _numbered(events, combat.state, actor, locale=locale, rules=self.rules),
        }

    def told(self, combat_id: str, events: Plain, actor: Actor, locale: str) -> list[Plain]:
        """A command result's ``events`` (as shown to ``actor``) with their narrated lines:
        results are kept encoded for retries, so these are decoded to be told."""
        assert isinstance(events, list)
        # The command that made them just ran: the combat is rebuilt.
        state = _telling(self.combats[combat_id].state, actor)
        told: list[Plain] = []
        for item in events:
            assert isinstance(item, dict)
            body = {k: v for k, v in item.items() if k != "seq"}
            summary = narrate(event_from_plain(body), state, locale, rules=self.rules)
            told.append({**item, "summary": summary})
        return told

    def plugin_listing(self) -> Plain:
        """The plugins loaded (with their counters), failed and skipped."""
        if self.plugins is None:
            return {"loaded": [], "failed": [], "skipped": []}
        return self.plugins.listing()

    def page(self, after: str | None, limit: int | None) -> list[Combat]:
        """The combats whose ids sort after ``after`` (all with None), in id order: ``limit``
        of them at most, or every one, refused when that is more than ``MAX_COMBAT_PAGE``.
        Ids sort by code point, so a page read later starts where the last ended, whatever
        was created in between or since a restart."""
        start = 0 if after is None else bisect.bisect_right(self.ids, after)
        if limit is None and len(self.ids) - start > MAX_COMBAT_PAGE:
            raise RequestError(
                "result_too_large",
                "more than {limit} combats: page with after and limit",
                "limit",
                limit=MAX_COMBAT_PAGE,
            )
        ids = self.ids[start : start + (MAX_COMBAT_PAGE if limit is None else limit)]
        return [self.combats[i] for i in ids]

    def summaries(self, after: str | None = None, limit: int | None = None) -> Plain:
        """One row per combat of a page (see ``page``), for every role (ids, rulesets, phases
        and rounds are not secret): from the stored summary while a combat is not rebuilt
        yet."""
        rows: list[Plain] = []
        for c in self.page(after, limit):
            if c.quarantined is not None:
                reason = c.quarantined[:MAX_REASON_CHARS]
                rows.append({"combat": c.id, "quarantined": reason})
                continue
            known = c.summary or {
                "ruleset": c.state.ruleset,
                "phase": c.state.phase,
                "round": c.state.round,
            }
            row = {k: known.get(k) for k in ("ruleset", "phase", "round")}
            rows.append({"combat": c.id, **row, "seq": c.seq})
        return rows

    async def subscribe(self, combat_id: str, subscriber: Subscriber, after: int) -> int:
        """Missed events first, then live, with no gap and no duplicate: the catch-up is read
        and the subscriber registered while the combat's writer is held."""
        combat = await self.combat(combat_id)
        async with combat.lock:
            if after < 0 or after > combat.seq:
                raise RequestError(
                    "invalid_params", "after must be 0..{seq}", "after", seq=combat.seq
                )
            if combat.seq - after > MAX_CATCH_UP:
                raise RequestError(
                    "too_far_behind",
                    "more than {limit} events behind: read get_combat and history first",
                    "after",
                    limit=MAX_CATCH_UP,
                )
            try:
                stored = self.store.events_after(combat.id, after, MAX_CATCH_UP)
            except StoreError as e:
                raise self._quarantine(combat, e) from e
            events = [(seq, event_from_plain(body)) for seq, body in stored]
            shown = _numbered(
                events,
                combat.state,
                subscriber.actor,
                locale=subscriber.narration,
                rules=self.rules,
            )
            packed = _packed(combat.id, shown)
            if len(packed) > subscriber.room():
                raise RequestError(
                    "too_far_behind", "the catch-up does not fit the outbox", "after"
                )
            for data in packed:
                subscriber.deliver(data)
            combat.subscribers.add(subscriber)
            self._following.setdefault(subscriber, set()).add(combat.id)
            return combat.seq

    def subscribe_all(self, subscriber: Subscriber, limit: int | None = None) -> Plain:
        """Live events of every combat, new ones included, from now on. The last seq of each
        combat of the first page (see ``page``) is returned, so a client can catch up on any
        with ``history``; ``until`` is the page's last id and ``more`` whether combats follow
        it, whose seqs ``list_combats`` pages on with. A refused request subscribes nothing."""
        page = self.page(None, limit)
        seqs: dict[str, Plain] = {c.id: c.seq for c in page if c.quarantined is None}
        self.everywhere.add(subscriber)
        until = page[-1].id if page else None
        return {"seqs": seqs, "until": until, "more": len(page) < len(self.ids)}

    def unsubscribe(self, subscriber: Subscriber, combat_id: str | None = None) -> None:
        """Stop the subscriber's events of one combat, or with None of every combat and of
        ``subscribe_all`` (a disconnect): only the combats it follows are visited."""
        if combat_id is None:
            self.everywhere.discard(subscriber)
            followed = self._following.pop(subscriber, set())
        else:
            followed = {combat_id}
            following = self._following.get(subscriber)
            if following is not None:
                following.discard(combat_id)
                if not following:
                    del self._following[subscriber]
        for followed_id in followed:
            combat = self.combats.get(followed_id)
            if combat is not None:
                combat.subscribers.discard(subscriber)

    # ------------------------------------------------------------------------------- clock

    def _due(self, combat: Combat) -> float | None:
        """When the clock must next tick ``combat``: its next deadline (from its stored summary
        while it is not rebuilt), not before ``clock_after``; None for no deadline, or when the
        combat is quarantined."""
        if combat.quarantined is not None:
            return None
        if combat.loaded:
            deadline = next_deadline(combat.state)
        else:
            stored = combat.summary.get("deadline") if combat.summary is not None else None
            deadline = float(stored) if isinstance(stored, int | float) else None
        return None if deadline is None else max(deadline, combat.clock_after)

    def _deadline_moved(self, combat: Combat) -> None:
        """Tell the clock that ``combat``'s deadline may have moved: its state changed (a
        commit, a rebuild), it was quarantined, or its ``clock_after`` changed. Only this
        combat is looked at: a new entry goes on the heap and the old one is left outdated,
        and the clock wakes only when the new time is sooner than what it sleeps until."""
        due = self._due(combat)
        if due == combat.clock_due:
            return
        combat.clock_due = due
        if due is None:
            combat.clock_ticket = 0  # its entry, if any, is outdated now
            return
        combat.clock_ticket = ticket = next(self._tickets)
        heapq.heappush(self._deadlines, (due, ticket, combat))
        if len(self._deadlines) > 2 * len(self.combats) + CLOCK_HEAP_SLACK:
            live = [e for e in self._deadlines if e[2].clock_ticket == e[1]]
            heapq.heapify(live)
            self._deadlines = live
        if due < self._clock_sleeps_until:
            self._wake.set()

    def _take_due(self, now: float) -> list[Combat]:
        """Take every combat due at ``now`` off the heap, dropping outdated entries."""
        heap = self._deadlines
        due: list[Combat] = []
        while heap and heap[0][0] <= now:
            _, ticket, combat = heapq.heappop(heap)
            if combat.clock_ticket == ticket:
                combat.clock_due = None
                combat.clock_ticket = 0
                due.append(combat)
        return due

    def _soonest(self) -> float:
        """The earliest due time on the heap (inf for none), outdated entries dropped."""
        heap = self._deadlines
        while heap and heap[0][2].clock_ticket != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    async def run_clock(self) -> None:
        """Let time pass for every combat: sleep until the earliest turn-timer or window
        deadline (persisted in the state, so honoured after a restart), then tick (R13). The
        deadlines wait on a heap that each commit updates for its own combat only."""
        async with anyio.create_task_group() as rebuilds:
            while True:
                self._wake = anyio.Event()
                for c in self._take_due(self.clock()):
                    if not c.loaded:
                        # Never waited for: a long log takes long to replay, and the other
                        # combats' deadlines go on meanwhile. Rebuilt (or abandoned), it is put
                        # back on the heap (``_load_once``).
                        if c.loading is None:
                            rebuilds.start_soon(self._load_once, c)
                        continue
                    due = self._due(c)
                    if due is None or due > self.clock():
                        # A command moved the deadline while earlier ticks ran.
                        self._deadline_moved(c)
                        continue
                    seq = c.seq
                    try:
                        await self._run(c, None, CLOCK_ACTOR, cmd.Tick())
                        spent = (c.seq - seq) / MAX_CLOCK_EVENTS_PER_SECOND
                        c.clock_after = self.clock() + spent
                        still = self._due(c)
                        if c.seq == seq and still is not None and still <= self.clock():
                            # The tick found nothing to do at a deadline still due (the
                            # engine's rules and ``next_deadline`` disagree): the heap would
                            # hand it straight back, so it is tried again later, not spun on.
                            c.clock_after = self.clock() + CLOCK_RETRY_SECONDS
                    except Exception:
                        # One combat's failed tick must not stop the clock, let alone the
                        # daemon; a store that fails now may recover, so no spinning meanwhile.
                        log.exception("tick_failed", combat=c.id)
                        await anyio.sleep(CLOCK_RETRY_SECONDS)
                    self._deadline_moved(c)
                soonest = self._soonest()
                self._clock_sleeps_until = soonest
                try:
                    with anyio.move_on_after(max(0.0, soonest - self.clock())):
                        await self._wake.wait()
                finally:
                    self._clock_sleeps_until = -math.inf
