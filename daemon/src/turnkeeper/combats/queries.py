"""Reads: a combat's view, its history, the summaries of every combat, and a command result's
events told in a session's language. No read waits for a writer."""

from __future__ import annotations

from turnkeeper_engine import Actor, RuleBook, view
from turnkeeper_engine.plain import Plain, event_from_plain, to_plain
from turnkeeper_sdk import wire

from ..stores.port import StoreError, StorePort
from ..tables import Scope
from .combat import Combat
from .follow import Follower
from .listing import Lister
from .registry import Combats
from .telling import audience, numbered, told


class Queries:
    """What clients read of the combats (``Combats``, rebuilt on first use by ``Rebuilder``)."""

    def __init__(
        self, store: StorePort, combats: Combats, reader: Follower, rules: RuleBook, lister: Lister
    ):
        self._store = store
        self._lister = lister
        self._combats = combats
        self._reader = reader
        self._rules = rules

    async def view(self, combat_id: str, actor: Actor, scope: Scope = None) -> wire.Packed:
        """The combat as ``actor`` may see it (R16), encoded once per audience and seq. One of
        a table outside ``scope`` is unknown: on a shared store a combat another daemon made
        is first known here when read, so only the read can tell its table."""
        return self._view(await self._reader.ready(combat_id, scope), actor)

    def view_now(self, combat_id: str, actor: Actor) -> wire.Packed | None:
        """``view`` without waiting: None when it would wait or refuse (the combat is unknown,
        not rebuilt yet nor followed, or quarantined), for ``view`` to do so."""
        combat = self._combats.by_id.get(combat_id)
        if (
            combat is None
            or not (combat.loaded or combat.followed)
            or combat.quarantined is not None
        ):
            return None
        return self._view(combat, actor)

    def _view(self, combat: Combat, actor: Actor) -> wire.Packed:
        if combat.views_seq != combat.seq:
            combat.views.clear()
            combat.views_seq = combat.seq
        key = audience(actor)
        encoded = combat.views.get(key)
        if encoded is None:
            seen = to_plain(view(combat.state, actor))
            body = {"combat": combat.id, "seq": combat.seq, "view": seen}
            encoded = combat.views[key] = wire.pack_value(body)
        return encoded

    async def history(
        self,
        combat_id: str,
        actor: Actor,
        after: int,
        limit: int,
        locale: str | None = None,
        scope: Scope = None,
    ) -> Plain:
        """A page of the events after ``after``, as ``actor`` may see them (unknown outside
        ``scope``, as ``view``)."""
        combat = await self._reader.ready(combat_id, scope)
        # Judged by the state it has now: a followed combat may be let go while the page is
        # read (its state dropped, ``Follower``), and none would hide nothing (R16).
        state, last = combat.state, combat.seq
        try:
            stored = await self._store.events_after(combat.id, after, limit)
        except StoreError as e:
            raise self._combats.quarantine(combat, e) from e
        # Of a followed combat, no event past the state it is judged by (R16) is shown.
        stored = [(seq, body) for seq, body in stored if seq <= last]
        events = [(seq, event_from_plain(body)) for seq, body in stored]
        return {
            "combat": combat.id,
            "seq": last,
            # The last seq this page read: a page can show fewer events than it read (R16),
            # so the next page starts after ``until``, not after the last event shown.
            "until": stored[-1][0] if stored else after,
            "events": numbered(events, state, actor, locale=locale, rules=self._rules),
        }

    def told(self, combat_id: str, events: Plain, actor: Actor, locale: str) -> list[Plain]:
        """A command result's ``events`` (as shown to ``actor``) with their narrated lines."""
        # The command that made them just ran: the combat is rebuilt.
        state = self._combats.by_id[combat_id].state
        return told(state, events, actor, locale, self._rules)

    async def summaries(
        self, after: str | None = None, limit: int | None = None, scope: Scope = None
    ) -> Plain:
        """One row per combat of a page of ``scope``'s tables (see ``Lister.page``), for
        every role (ids, rulesets, phases and rounds are not secret within a table)."""
        rows, _ = await self._lister.page(after, limit, scope)
        return list(rows)
