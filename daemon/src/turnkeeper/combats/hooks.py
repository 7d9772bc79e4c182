"""Plugins' hooks of committed commands, run in the background: a bounded queue of the
commands whose hooks are due, and the workers that run them, each for a share of the combats,
in each combat's commit order."""

from __future__ import annotations

from typing import Protocol

import anyio
import structlog

from turnkeeper_engine import commands as cmd
from turnkeeper_engine.pipeline import Applied

from .combat import Combat

log = structlog.get_logger("turnkeeper.combats")

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


class Reactor(Protocol):
    """What runs one committed command's hooks (the writer: the commands they propose go
    through its pipeline)."""

    async def react(self, combat: Combat, applied: Applied) -> None:
        """Run ``applied``'s hooks; the commands plugins propose commit in ``combat``."""
        ...


class Room:
    """A command's claim on its worker's ``HOOK_QUEUE``, taken before it is decided."""

    __slots__ = ("observe", "placed", "queued")

    def __init__(self) -> None:
        self.observe = False
        """Whether the command's hooks are due once it commits."""
        self.placed = False
        """Whether it holds a place in its hook worker's ``HOOK_QUEUE``."""
        self.queued = False
        """Set once it is on its combat's list of hooks due (holding its place, if placed)."""


class HookWorkers:
    """The hooks due, by worker, and the workers that run them (``run``)."""

    def __init__(self) -> None:
        self._workers = workers = HOOK_WORKERS
        self._ready: list[dict[str, Combat]] = [{} for _ in range(workers)]
        """Combats with hooks due, by worker, oldest first: one entry per combat, so bounded
        like the combats themselves."""
        self._ready_wake = [anyio.Event() for _ in range(workers)]
        self._places = [0] * workers
        """Places taken in each worker's ``HOOK_QUEUE``."""
        self._room: list[anyio.Event | None] = [None] * workers
        """Set when a place is freed in a worker's queue, for the clients waiting for one;
        made by the first that waits, so a queue with room costs no event per command."""
        self._stopped = False
        """Set once the workers stop: nobody waits for room any more."""

    def shard(self, combat: Combat) -> int:
        """The worker whose share ``combat`` is."""
        return hash(combat.id) % self._workers

    def make_room(self, room: Room, clock: bool, command: cmd.Command, combat: Combat) -> bool:
        """A place in the worker's ``HOOK_QUEUE`` for the command's hooks, taken before it is
        decided: the clock takes one only if there is room; a client's is taken here if there
        is room, else False, and the client waits for one (``wait_room``). Never waits: a
        queue with room costs a command no coroutine."""
        shard = self.shard(combat)
        if clock:
            room.placed = room.observe = self._places[shard] < HOOK_QUEUE
            if room.placed:
                self._places[shard] += 1
                combat.places += 1
            else:
                # The clock cannot wait, and the queue must stay bounded: plugins that are
                # this far behind miss the hooks of this tick.
                log.warning("plugin_hooks_skipped", combat=combat.id, command=command.name)
            return True
        # No hook stands for a combat's creation.
        room.observe = type(command) is not cmd.CreateCombat  # see ``methods.command``
        if not room.observe:
            return True
        if self._places[shard] >= HOOK_QUEUE or combat.places >= HOOK_QUEUE_PER_COMBAT:
            return False
        self._places[shard] += 1
        combat.places += 1
        room.placed = True
        return True

    async def wait_room(self, room: Room, combat: Combat) -> None:
        """Wait for the place ``make_room`` found no room for, and take it."""
        room.placed = await self._take_place(self.shard(combat), combat)

    async def _take_place(self, shard: int, combat: Combat) -> bool:
        """Wait for room in a worker's ``HOOK_QUEUE``, and in the combat's share of it, and
        take a place: False when the workers have stopped (the daemon is stopping), and hooks
        due then are not run."""
        while self._places[shard] >= HOOK_QUEUE or combat.places >= HOOK_QUEUE_PER_COMBAT:
            if self._stopped:
                return False
            room = self._room[shard]
            if room is None:
                room = self._room[shard] = anyio.Event()
            await room.wait()
        self._places[shard] += 1
        combat.places += 1
        return True

    def due(self, combat: Combat, applied: Applied, room: Room | None) -> None:
        """On the combat's list of hooks due, under the writer's lock, so in commit order: a
        plugin's command (no ``room``) always, a client's or the clock's when it has room."""
        if room is None:
            combat.hooks_due.append((applied, False))
        elif room.observe:
            combat.hooks_due.append((applied, room.placed))
            room.queued = True

    def settle(self, combat: Combat, room: Room) -> None:
        """After a command's way through the pipeline, committed or refused: a place it took
        and did not use is freed, and hooks due (even a refused command's before hooks may
        have applied commands) go to the combat's worker. Never waits."""
        shard = self.shard(combat)
        if room.placed and not room.queued:
            self._free_place(shard, combat)
        if combat.hooks_due:
            self._mark_ready(combat, shard)

    def _free_place(self, shard: int, combat: Combat) -> None:
        self._places[shard] -= 1
        combat.places -= 1
        room = self._room[shard]
        if room is not None:
            room.set()
            self._room[shard] = None

    def _mark_ready(self, combat: Combat, shard: int) -> None:
        """Put a combat with hooks due on its worker's list; never waits."""
        self._ready[shard].setdefault(combat.id, combat)
        self._ready_wake[shard].set()

    async def run(self, reactor: Reactor) -> None:
        """Run plugins' hooks for committed commands until cancelled, one worker per share of
        the combats; then clients waiting for room go on without."""
        try:
            async with anyio.create_task_group() as tg:
                for shard in range(self._workers):
                    tg.start_soon(self._worker, reactor, shard)
        finally:
            self._stopped = True
            for room in self._room:
                if room is not None:
                    room.set()

    async def _worker(self, reactor: Reactor, shard: int) -> None:
        ready = self._ready[shard]
        while True:
            while not ready:
                self._ready_wake[shard] = anyio.Event()
                await self._ready_wake[shard].wait()
            combat = ready.pop(next(iter(ready)))
            await self.run_due(reactor, combat)
            if combat.hooks_due:
                # To the back of the list: the worker's combats take turns.
                self._mark_ready(combat, shard)

    async def run_due(self, reactor: Reactor, combat: Combat) -> None:
        """The hooks of a combat's oldest command due: the commands plugins cause join the
        same list as they commit, so the order holds."""
        applied, placed = combat.hooks_due.popleft()
        try:
            await reactor.react(combat, applied)
        except Exception:
            # The host isolates each plugin already: this is the daemon's own failure. That
            # command's hooks are lost; the worker goes on.
            log.exception("plugin_hooks_failed", combat=combat.id, seq=applied.seq)
        finally:
            if placed:
                self._free_place(self.shard(combat), combat)
