"""The clock (R13): lets time pass for every combat, sleeping until the earliest deadline on
the heap (``deadlines.Deadlines``) and ticking the combats due through the writer."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog

from turnkeeper_engine import Actor
from turnkeeper_engine import commands as cmd
from turnkeeper_engine.pipeline import RefusedError

from .deadlines import Deadlines
from .rebuild import Rebuilder
from .writer import Writer

log = structlog.get_logger("turnkeeper.combats")

CLOCK_RETRY_SECONDS = 1.0
"""After a failed tick the clock waits this long before trying again."""

MAX_CLOCK_EVENTS_PER_SECOND = 10.0
"""Events the clock's ticks may record for one combat per second, on average. A turn at the
shortest limit (1 s, R13) costs about five; a combat whose deadlines come faster (a turn limit
recorded before that minimum) would otherwise write thousands a second. After a tick that
recorded n events the combat's next tick waits n / this many seconds: a deadline due meanwhile
is deferred, never dropped, and that tick applies it (and all else due) late."""

CLOCK_ACTOR = Actor("narrator", None, "clock")
"""The daemon's own clock acts as narrator when it lets time pass (R13)."""


class Clock:
    """Ticks each combat at its deadlines, persisted in its state, so honoured after a
    restart."""

    def __init__(
        self,
        deadlines: Deadlines,
        rebuilder: Rebuilder,
        writer: Writer,
        clock: Callable[[], float],
    ) -> None:
        self._deadlines = deadlines
        self._rebuilder = rebuilder
        self._writer = writer
        self._clock = clock

    async def run(self) -> None:
        """Let time pass for every combat: sleep until the earliest turn-timer or window
        deadline, then tick (R13). The deadlines wait on a heap that each commit updates for
        its own combat only."""
        deadlines, now = self._deadlines, self._clock
        async with anyio.create_task_group() as rebuilds:
            while True:
                deadlines.wake = anyio.Event()
                for c in deadlines.take_due(now()):
                    if not c.loaded:
                        # Never waited for: a long log takes long to replay, and the other
                        # combats' deadlines go on meanwhile. Rebuilt (or abandoned), it is put
                        # back on the heap (``Rebuilder.load_once``).
                        if c.loading is None:
                            rebuilds.start_soon(self._rebuilder.load_once, c)
                        continue
                    due = deadlines.due(c)
                    if due is None or due > now():
                        # A command moved the deadline while earlier ticks ran.
                        deadlines.moved(c)
                        continue
                    seq = c.seq
                    try:
                        await self._writer.run(c, None, CLOCK_ACTOR, cmd.Tick())
                        spent = (c.seq - seq) / MAX_CLOCK_EVENTS_PER_SECOND
                        c.clock_after = now() + spent
                        still = deadlines.due(c)
                        if c.seq == seq and still is not None and still <= now():
                            # The tick found nothing to do at a deadline still due (the
                            # engine's rules and ``next_deadline`` disagree): the heap would
                            # hand it straight back, so it is tried again later, not spun on.
                            c.clock_after = now() + CLOCK_RETRY_SECONDS
                    except Exception as e:
                        if isinstance(e, RefusedError) and e.code == "combat_moved":
                            # Another daemon holds the combat now and runs its clock: nothing
                            # failed here, and the other combats due are not held up.
                            log.info("tick_moved", combat=c.id)
                        else:
                            # One combat's failed tick must not stop the clock, let alone the
                            # daemon; a store that fails now may recover, so no spinning
                            # meanwhile.
                            log.exception("tick_failed", combat=c.id)
                            await anyio.sleep(CLOCK_RETRY_SECONDS)
                    deadlines.moved(c)
                soonest = deadlines.soonest()
                deadlines.sleeps_until = soonest
                try:
                    with anyio.move_on_after(max(0.0, soonest - now())):
                        await deadlines.wake.wait()
                finally:
                    deadlines.sleeps_until = float("-inf")
