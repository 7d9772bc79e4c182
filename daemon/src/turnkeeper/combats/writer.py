"""The write path: a command, once (idempotency by request id), through the one pipeline
(``turnkeeper_engine.pipeline``) whose ports this module plugs in: the store behind
``commit``, the subscribers behind ``publish`` and the hook workers behind ``due``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import operator
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from functools import partial
from typing import Any, TypeGuard

import anyio
import msgpack  # type: ignore[import-untyped]

from turnkeeper_engine import Actor, RuleBook, State
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine.errors import ProtocolError
from turnkeeper_engine.pipeline import Applied, Pipeline, RefusedError
from turnkeeper_engine.plain import Plain, command_to_plain, event_to_plain, to_shared
from turnkeeper_sdk import wire

from ..stores.port import FIRST_EPOCH, Batch, StoreError, StorePort
from ..tables import Scope, table_of
from .combat import Combat, summary, unchanged
from .deadlines import Deadlines
from .errors import RequestError
from .fanout import SubscriptionRegistry
from .hooks import HookWorkers, Room
from .rebuild import Rebuilder
from .registry import Combats
from .telling import numbered_packed

# A command's result, ``{"combat": …, "seq": …, "events": […]}``, and what is remembered for a
# retry, ``{"fingerprint": …, "result": …}``, are made from bytes packed already: their maps'
# heads and keys, as msgpack packs them.
_RESULT_HEAD = msgpack.Packer().pack_map_header(3) + msgpack.packb("combat")
_SEQ = msgpack.packb("seq")
_EVENTS = msgpack.packb("events")
_REMEMBERED_HEAD = msgpack.Packer().pack_map_header(2) + msgpack.packb("fingerprint")
_RESULT = msgpack.packb("result")

FINGERPRINT_BYTES = 20
"""Digest size of a request's fingerprint: 160 bits, so no two commands one principal sends
share one by chance. Its 40 hex digits tell it from those stored before it: the 32 of
``fingerprint_v2`` and the 64 of ``fingerprint_v1``."""

_FIELDS: dict[type, Callable[[Any], Any]] = {}
"""Each dataclass's fields' values, read in one call (``operator.attrgetter``), by class."""

_fingerprinting = threading.local()
"""Each thread's packer of fingerprinted requests (one packer is not for two threads)."""


def _fields(value: object) -> tuple[str, Any]:
    """A command, or a dataclass value nested in one, as msgpack packs it for a fingerprint:
    its class's name and every field's value, in the class's order (one field's value alone,
    none's as an empty tuple: the class's name tells which)."""
    kind = type(value)
    read = _FIELDS.get(kind)
    if read is None:
        if not is_dataclass(kind):
            raise TypeError(f"a command holds a {kind.__name__}, which has no fingerprint")
        names = [f.name for f in fields(kind)]
        read = _FIELDS[kind] = operator.attrgetter(*names) if names else lambda _: ()
    return kind.__qualname__, read(value)


def fingerprint(combat_id: str, actor: Actor, command: cmd.Command) -> str:
    """What a request id stands for, so a reused id with another command (or, from a bridge,
    for another user) is caught. A command is a frozen dataclass of plain values, nested ones
    included (``tests/test_hub.py`` keeps it so): every field's value, read with no ``repr``
    and packed with msgpack, is digested, at 13,000 instructions against 22,600 for
    ``fingerprint_v2``'s ``repr`` (an ``apply_condition``, under callgrind)."""
    try:
        pack = _fingerprinting.pack
    except AttributeError:
        pack = _fingerprinting.pack = msgpack.Packer(use_bin_type=True, default=_fields).pack
    body = pack((combat_id, actor.role, actor.user, actor.via, command))
    return hashlib.blake2b(body, digest_size=FINGERPRINT_BYTES).hexdigest()


def fingerprint_v2(combat_id: str, actor: Actor, command: cmd.Command) -> str:
    """The fingerprint daemons before this one stored (16 bytes, of the request's ``repr``): a
    retry they remembered, answered after an upgrade, is recognised by it."""
    body = repr((combat_id, actor.role, actor.user, actor.via, command))
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def fingerprint_v1(combat_id: str, actor: Actor, command: cmd.Command) -> str:
    """The fingerprint daemons before ``fingerprint_v2``'s stored (32 bytes, of the request as
    JSON): a retry they remembered, answered after an upgrade, is recognised by it."""
    who = [actor.role, actor.user, actor.via]
    body = json.dumps([combat_id, who, command_to_plain(command)], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _same_request(known: object, combat_id: str, actor: Actor, command: cmd.Command) -> bool:
    """Whether a remembered fingerprint (``known``) stands for this request."""
    if known == fingerprint(combat_id, actor, command):
        return True
    if not isinstance(known, str):
        return False
    if len(known) == 32:
        return known == fingerprint_v2(combat_id, actor, command)
    return len(known) == 64 and known == fingerprint_v1(combat_id, actor, command)


def _first(
    remembered: tuple[str, Any], combat_id: str, actor: Actor, command: cmd.Command
) -> Plain:
    """The result remembered for a request id (``StorePort.lookup_request``'s answer);
    refused if the id was used for another command."""
    stored = remembered[1]
    if not _same_request(stored.get("fingerprint"), combat_id, actor, command):
        raise RequestError(
            "request_id_reused",
            "this request_id was used for a different command",
            "request_id",
        )
    return stored["result"]  # type: ignore[no-any-return]


@dataclass(slots=True, eq=False)
class _Ticket:
    """What the writer attaches to one command of a client or the clock on its way through the
    pipeline (a plugin's command has none)."""

    request: tuple[str, str] | None = None
    """(principal, request_id): remembered with the result, for retries."""
    fingerprint: str = ""
    ruleset: str | None = None
    """A new combat's ruleset, stored with its row."""
    room: Room = field(default_factory=Room)
    """Its claim on the hook workers' queue."""
    result: Plain = None
    """The result its caller gets, set as it commits."""


class _CombatLog:
    """One combat as the pipeline's port: the store behind ``commit``, the subscription
    registry behind ``publish``, the hook workers behind ``due``."""

    __slots__ = ("_combat", "_numbered", "_plains", "_rows", "_writer")

    def __init__(self, writer: Writer, combat: Combat) -> None:
        self._writer = writer
        self._combat = combat
        self._numbered: list[tuple[int, ev.Event]] = []
        self._plains: list[dict[str, Plain]] = []
        self._rows: tuple[bytes, ...] = ()

    @property
    def state(self) -> State:
        return self._combat.state

    @property
    def seq(self) -> int:
        return self._combat.seq

    def writing(self) -> asyncio.Lock:
        return self._combat.lock

    async def commit(self, applied: Applied, ticket: _Ticket | None) -> None:
        """Durable before anything else sees it: one batch for the store's group commit, with
        the caller's result when it came with a request id (retries get it back)."""
        writer, combat = self._writer, self._combat
        # ``first`` read once and ``states[-1]`` for ``after``: a property is a call.
        first = applied.first
        events = list(enumerate(applied.events, start=first))
        # ``map``, not a comprehension: no frame of its own per command.
        plains = list(map(event_to_plain, applied.events))
        last = applied.seq
        state = applied.states[-1]
        every = writer.snapshot_every
        if combat.snapshot_seq == 0:
            # A combat's first snapshot comes after between half and all of ``every`` events,
            # by its id: combats that move in step (made together, played at one pace) would
            # otherwise all snapshot in the same transaction, over and over, and every command
            # in it would wait for all those encodings (p99 3x at --snapshot-every 100).
            every -= zlib.crc32(combat.id.encode()) % (every // 2 + 1)
        snapshot = last - combat.snapshot_seq >= every
        request = ticket.request if ticket is not None else None
        response: Plain = None
        remembered: bytes | None = None
        packer = writer.packer
        rows = tuple(map(packer.pack, plains))
        if ticket is not None and request is not None:
            # Only a client's command has a caller to answer, now and on a retry. Its events
            # are packed once, as the store's rows: the answer remembered for a retry and the
            # reply are made of those bytes (``telling.numbered_packed``).
            shown, items = numbered_packed(events, state, applied.actor, plains, rows, packer)
            packed = b"".join(
                (
                    _RESULT_HEAD,
                    packer.pack(combat.id),
                    _SEQ,
                    packer.pack(last),
                    _EVENTS,
                    packer.pack_array_header(len(items)),
                    *items,
                )
            )
            response = wire.PackedMap(packed, combat=combat.id, seq=last, events=shown)
            remembered = _REMEMBERED_HEAD + packer.pack(ticket.fingerprint) + _RESULT + packed
        # Every field given, in ``Batch``'s order, by position: thirteen keywords matched by
        # name cost ~1,000 instructions more, once per command.
        batch = Batch(
            combat.id,
            first,
            tuple(plains),
            ticket.ruleset if ticket is not None else None,
            request,
            None,
            applied.now,
            partial(to_shared, state) if snapshot else None,
            summary(state, last),
            combat.table,
            combat.epoch,
            rows,
            remembered,
        )
        try:
            await writer.store.commit(batch)
        except StoreError as e:
            if e.code in ("store_unavailable", "combat_moved"):
                # Whether the batch was kept may be unknown, or another daemon may have
                # appended since (its lease lost): the combat is read again from the store
                # before its next command, rather than trusted as it is in memory.
                writer.rebuilder.forget(combat)
            raise RefusedError.relay(e, e.code, e.field) from e
        combat.state = state
        combat.seq = last
        if snapshot:
            combat.snapshot_seq = last
        writer.deadlines.moved(combat)
        if ticket is not None:
            ticket.result = response
        self._numbered, self._plains, self._rows = events, plains, rows

    def publish(self, applied: Applied) -> None:
        self._writer.subscriptions.publish(self._combat, self._numbered, self._plains, self._rows)

    def due(self, applied: Applied, ticket: _Ticket | None) -> None:
        writer = self._writer
        if writer.observes is not None and not writer.observes(applied):
            return  # its after hooks would do nothing: no worker needs to wake for it
        writer.hooks.due(self._combat, applied, ticket.room if ticket is not None else None)


class Writer:
    """Applies commands to combats: a client's (``execute``), the clock's (``run``) and those
    plugins propose (``react``, for the hook workers)."""

    def __init__(
        self,
        *,
        store: StorePort,
        pipeline: Pipeline[Any],
        combats: Combats,
        rebuilder: Rebuilder,
        deadlines: Deadlines,
        subscriptions: SubscriptionRegistry,
        hooks: HookWorkers,
        snapshot_every: int,
        observes: Callable[[Applied], bool] | None = None,
    ) -> None:
        self.store = store
        self.pipeline: Pipeline[_Ticket] = pipeline
        self.rules: RuleBook = pipeline.rules
        self.combats = combats
        self.rebuilder = rebuilder
        self.deadlines = deadlines
        self.subscriptions = subscriptions
        self.hooks = hooks
        self.snapshot_every = snapshot_every
        self.observes = observes
        """Whether a committed command's after hooks have anything to do (the plugin host's
        ``after_due``); None: all of them do."""
        self.packer = msgpack.Packer(use_bin_type=True)
        """The event loop's packer for commands' rows and results (one packer is not for two
        threads at once): reused, it packs in half the time ``msgpack.packb`` takes."""
        self._in_flight: dict[tuple[str, str], anyio.Event | None] = {}
        """Request ids being applied, with the event a retry of one waits on (made by the
        first retry: a request is almost never retried while in flight)."""

    async def execute(
        self,
        principal: str,
        actor: Actor,
        combat_id: str,
        command: cmd.Command,
        request_id: str,
        scope: Scope = None,
    ) -> Plain:
        """Apply a command once. A retried ``request_id`` gets the first result back, also
        across a restart, and is never applied twice. A combat outside ``scope``'s tables is
        refused as unknown when it is looked up: it may have been made while this request
        waited, after the session's own check found no such combat."""
        key = (principal, request_id)
        in_flight = self._in_flight
        while key in in_flight:
            done = in_flight[key]
            if done is None:
                done = in_flight[key] = anyio.Event()
            await done.wait()
        # In flight from here: the lookup may wait for a database read, and a retry arriving
        # meanwhile must wait for this one's answer, not run beside it.
        in_flight[key] = None
        shared = self.rebuilder.shared
        hooks = self.pipeline.hooks
        try:
            if (
                shared is None
                or shared.alone
                or (hooks is not None and hooks.before_hooks(command))
            ):
                # ``_first_result``, spelled out: every command asks, and is almost never a
                # retry. Alone on its database, the store's filter answers a new id without a
                # read. Before hooks may commit commands of their own (proposals), which a
                # repeat must not run again: they are asked before too.
                remembered = await self.store.lookup_request(principal, request_id)
                unread = False
            else:
                # Shared with other daemons, the commit finds a repeat (the database refuses
                # to store its id again, and nothing of it is kept): no read before a new
                # command, only once it ends otherwise than committed.
                remembered = shared.recent_request(principal, request_id)
                unread = remembered is None
            if remembered is not None:
                return _first(remembered, combat_id, actor, command)
            ticket = _Ticket(key, fingerprint(combat_id, actor, command))
            found = self.combats.by_id.get(combat_id)
            if type(command) is not cmd.CreateCombat and _usable(found, scope):
                # ``_apply``'s usual way, spelled out: a coroutine less for each of the
                # command's suspensions and resumptions to pass through.
                result = await self.run(found, ticket, actor, command)
            else:
                result = await self._apply(
                    ticket, actor, combat_id, command, scope, looked=not unread
                )
        except ProtocolError as e:
            if shared is None or not (unread or e.code == "conflict"):
                raise
            # The database refused to store the id again (another daemon stored it, or made the
            # combat, unseen by this one's filter), or a command not looked up before changed
            # nothing or was refused, decided on a state after its first time: the first
            # result, if there is one, is the one to give.
            first = await self._first_result(key, combat_id, actor, command)
            if first is None:
                if e.code == "conflict" and isinstance(command, cmd.CreateCombat):
                    # Its id was not stored: the combat row was, by a daemon this one has not
                    # heard of it from (ids carry their table, so it is the caller's table's).
                    raise RequestError(
                        "combat_exists", "combat {id!r} exists", "combat_id", id=combat_id
                    ) from e
                raise
            return first
        finally:
            done = in_flight.pop(key)
            if done is not None:
                done.set()
        if unread and ticket.result is None:
            # Nothing committed, so nothing stored the id: it may be a repeat, decided anew.
            first = await self._first_result(key, combat_id, actor, command)
            if first is not None:
                return first
        return result

    async def _apply(
        self,
        ticket: _Ticket,
        actor: Actor,
        combat_id: str,
        command: cmd.Command,
        scope: Scope,
        *,
        looked: bool,
    ) -> Plain:
        """``execute``'s command, its id not remembered as far as was ``looked`` up."""
        if type(command) is cmd.CreateCombat:  # not ``isinstance``: see ``methods.command``
            async with self.combats.creating(combat_id):
                combat = Combat(combat_id, State(), 0, table=table_of(combat_id), epoch=FIRST_EPOCH)
                ticket.ruleset = command.ruleset
                result = await self.run(combat, ticket, actor, command)
                self.combats.add(combat)
                return result
        found = self.combats.by_id.get(combat_id)
        if not _usable(found, scope):
            # Not known, not rebuilt yet, quarantined or another table's: ``ready`` knows
            # what to do.
            found = await self.rebuilder.ready(combat_id, scope)
            if looked and self.rebuilder.shared is not None:
                # Its lease held now: the same request in flight at the daemon that held
                # it (a client's retry racing its original) was committed before it let go.
                # (Not looked up before, a repeat is found as it ends, whatever it does.)
                assert ticket.request is not None
                first = await self._first_result(ticket.request, combat_id, actor, command)
                if first is not None:
                    return first
        return await self.run(found, ticket, actor, command)

    async def _first_result(
        self, key: tuple[str, str], combat_id: str, actor: Actor, command: cmd.Command
    ) -> Plain:
        """The result remembered for the request id ``key``, or None if none is; refused
        if the id was used for another command."""
        remembered = await self.store.lookup_request(*key)
        return None if remembered is None else _first(remembered, combat_id, actor, command)

    async def run(
        self, combat: Combat, ticket: _Ticket | None, actor: Actor, command: cmd.Command
    ) -> Plain:
        """A client's command (its ``ticket``) or the clock's (None) through the pipeline. With
        plugins, room for its hooks first (a client waits for it; the clock never does, and goes
        without hooks when there is none); its hooks and those of all it committed are handed
        to the background, in commit order. No lock is held while a hook runs or a client waits
        for room, and nothing waits once the command is committed."""
        clock = ticket is None
        ticket = ticket or _Ticket()
        if self.pipeline.hooks is not None and not self.hooks.make_room(
            ticket.room, clock, command, combat
        ):
            await self.hooks.wait_room(ticket.room, combat)
        try:
            # A refusal (``RefusedError``) goes up as it is: the session tells it, like any.
            applied = await self.pipeline.run(_CombatLog(self, combat), actor, command, ticket)
        finally:
            self.hooks.settle(combat, ticket.room)
        return ticket.result if applied is not None else unchanged(combat)

    async def react(self, combat: Combat, applied: Applied) -> None:
        """Run ``applied``'s hooks: the commands plugins propose commit through this writer's
        pipeline, and their own hooks join the combat's list."""
        await self.pipeline.react(_CombatLog(self, combat), applied)


def _usable(found: Combat | None, scope: Scope) -> TypeGuard[Combat]:
    """Whether a command may run on ``found`` as it is: known, rebuilt, not quarantined and
    of a table in ``scope``. ``execute``'s way round ``_apply`` and ``_apply`` both ask this
    one question, so a condition added to it holds on both."""
    return (
        found is not None
        and found.loaded
        and found.quarantined is None
        and (scope is None or found.table in scope)
    )
