"""The clock's deadlines: a heap of when each combat is next due, updated for one combat at a
time (a commit, a rebuild, a quarantine), never rescanned whole."""

from __future__ import annotations

import heapq
import itertools
import math

import anyio

from turnkeeper_engine import next_deadline

from .combat import Combat

CLOCK_HEAP_SLACK = 1024
"""Outdated entries the clock's heap may hold beyond one per combat before it is rebuilt from
the live ones: a deadline that moves leaves its old entry behind (dropped when it comes up), and
a deadline moved later again and again would otherwise grow the heap with every command."""


class Deadlines:
    """When each combat is due: (due, ticket, combat) entries on a heap, the live entry of a
    combat being the one whose ticket it holds (``Combat.clock_ticket``); at most one live
    entry per combat. ``wake`` is set when a deadline comes sooner than the clock sleeps."""

    def __init__(self, owned_only: bool = False) -> None:
        self.owned_only = owned_only
        """Only combats rebuilt here are due (a store many daemons share: a combat not
        rebuilt here may be another daemon's, whose clock runs it)."""
        self.entries: list[tuple[float, int, Combat]] = []
        self._tickets = itertools.count(1)
        self._live = 0
        """Combats with a live entry: the heap's bound counts from them."""
        self.wake = anyio.Event()
        self.sleeps_until = -math.inf
        """The due time the clock sleeps until; -inf while it is not asleep (it reads the
        heap before it sleeps again)."""

    def due(self, combat: Combat) -> float | None:
        """When the clock must next tick ``combat``: its next deadline (from its stored summary
        while it is not rebuilt), not before ``clock_after``; None for no deadline, or when the
        combat is quarantined, or not rebuilt with ``owned_only``."""
        if combat.quarantined is not None:
            return None
        if combat.loaded:
            deadline = next_deadline(combat.state)
        elif self.owned_only:
            return None
        else:
            stored = combat.summary.get("deadline") if combat.summary is not None else None
            deadline = float(stored) if isinstance(stored, int | float) else None
        return None if deadline is None else max(deadline, combat.clock_after)

    def moved(self, combat: Combat) -> None:
        """Tell the clock that ``combat``'s deadline may have moved: its state changed (a
        commit, a rebuild), it was quarantined, or its ``clock_after`` changed. Only this
        combat is looked at: a new entry goes on the heap and the old one is left outdated,
        and the clock wakes only when the new time is sooner than what it sleeps until."""
        due = self.due(combat)
        if due == combat.clock_due:
            return
        if combat.clock_due is None:
            self._live += 1
        combat.clock_due = due
        if due is None:
            self._live -= 1
            combat.clock_ticket = 0  # its entry, if any, is outdated now
            return
        combat.clock_ticket = ticket = next(self._tickets)
        heapq.heappush(self.entries, (due, ticket, combat))
        if len(self.entries) > 2 * self._live + CLOCK_HEAP_SLACK:
            live = [e for e in self.entries if e[2].clock_ticket == e[1]]
            heapq.heapify(live)
            self.entries = live
        if due < self.sleeps_until:
            self.wake.set()

    def take_due(self, now: float) -> list[Combat]:
        """Take every combat due at ``now`` off the heap, dropping outdated entries."""
        heap = self.entries
        due: list[Combat] = []
        while heap and heap[0][0] <= now:
            _, ticket, combat = heapq.heappop(heap)
            if combat.clock_ticket == ticket:
                combat.clock_due = None
                combat.clock_ticket = 0
                self._live -= 1
                due.append(combat)
        return due

    def soonest(self) -> float:
        """The earliest due time on the heap (inf for none), outdated entries dropped."""
        heap = self.entries
        while heap and heap[0][2].clock_ticket != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf
