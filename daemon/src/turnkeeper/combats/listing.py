"""Pages of combats (``list_combats``, and ``subscribe_all``'s answer): from the registry on a
store of the daemon's own, which knows every combat; on a store many daemons share, from the
store, which knows every daemon's, each combat this daemon reads as it has it."""

from __future__ import annotations

from turnkeeper_engine.plain import Plain

from ..stores.port import ListedCombat, SharedStore, StorePort
from ..tables import Scope
from .combat import UNBUILT, Combat
from .follow import Follower
from .registry import MAX_COMBAT_PAGE, Combats, too_large

MAX_REASON_CHARS = 200
"""Longest quarantine reason a ``list_combats`` row shows; the daemon's log has it whole."""


def row(combat: Combat) -> dict[str, Plain]:
    """A combat's ``list_combats`` row as this daemon has it: from its stored summary while it
    is not rebuilt."""
    if combat.quarantined is not None:
        return {"combat": combat.id, "quarantined": combat.quarantined[:MAX_REASON_CHARS]}
    known = combat.summary or {
        "ruleset": combat.state.ruleset,
        "phase": combat.state.phase,
        "round": combat.state.round,
    }
    seq = combat.seq if combat.told is None else combat.told
    return {"combat": combat.id, **_shown(known), "seq": seq}


def _shown(summary: dict[str, Plain]) -> dict[str, Plain]:
    return {k: summary.get(k) for k in ("ruleset", "phase", "round")}


def _stored_row(listed: ListedCombat) -> dict[str, Plain]:
    known = listed.summary if isinstance(listed.summary, dict) else {"ruleset": listed.ruleset}
    return {"combat": listed.combat_id, **_shown(known), "seq": listed.seq}


class Lister:
    """Pages of the combats of a scope's tables, in id order (see ``Combats.page``)."""

    def __init__(self, store: StorePort, combats: Combats, reader: Follower) -> None:
        self._shared = store if isinstance(store, SharedStore) else None
        self._combats = combats
        self._reader = reader

    async def page(
        self, after: str | None, limit: int | None, scope: Scope = None
    ) -> tuple[list[dict[str, Plain]], bool]:
        """The rows of the combats of ``scope``'s tables (None: every table) whose ids sort
        after ``after``: ``limit`` of them at most, or every one, refused with
        ``result_too_large`` when that is more than ``MAX_COMBAT_PAGE``; and whether more
        follow them.

        On a store many daemons share, a combat another daemon made since this one started
        is known here only once used or heard of: the page is read from the store (one
        query, ``store_unavailable`` if it does not answer in time), and each combat on it
        that this daemon did not know is known from then on (room permitting,
        ``MAX_COMBATS``). A combat this daemon holds, follows or has shown a subscriber
        here is listed as it has it: its seq is then what its subscribers here were told,
        so a ``subscribe_all`` that pages on from it is told every later event, once."""
        size = MAX_COMBAT_PAGE if limit is None else limit
        if self._shared is None:
            page = self._combats.page(after, limit, scope)
            more = bool(page) and bool(self._combats.first(page[-1].id, 1, scope))
            return [row(c) for c in page], more
        stored = await self._shared.combat_page(after, size + 1, scope)
        # Nothing awaited from here on: the page is what the registry and the store agree
        # on at one moment, and a ``subscribe_all`` registers at that moment too.
        rows: dict[str, dict[str, Plain]] = {}
        for listed in stored:
            rows[listed.combat_id] = self._known(listed)
        # A combat made here whose first commit the store's read did not see yet.
        for combat in self._combats.first(after, size + 1, scope):
            if combat.id not in rows:
                rows[combat.id] = row(combat)
        ids = sorted(rows)
        if limit is None and len(ids) > MAX_COMBAT_PAGE:
            raise too_large()
        return [rows[i] for i in ids[:size]], len(ids) > size

    def _known(self, listed: ListedCombat) -> dict[str, Plain]:
        """The row of a combat the store listed, as this daemon has it if it reads it, else
        as stored, which this daemon knows it by from now on."""
        combats = self._combats
        combat = combats.by_id.get(listed.combat_id)
        if combat is None:
            if combats.has_room():
                summary = listed.summary if isinstance(listed.summary, dict) else None
                found = Combat(
                    listed.combat_id,
                    UNBUILT,
                    listed.seq,
                    loaded=False,
                    summary=summary,
                    table=listed.table,
                )
                combats.add(found)
            return _stored_row(listed)
        if (
            combat.quarantined is not None
            or combat.loaded
            or combat.followed
            or self._reader.watched(combat)
        ):
            return row(combat)
        if combat.loading is not None or combat.lock.locked():
            # Being read: that read makes its state, and tells a subscriber registered with
            # this page the events after the seq this daemon has it at (``Follower._follow``,
            # ``Follower.handover``), whatever the store has now.
            seq = combat.seq if combat.told is None else combat.told
            return {**_stored_row(listed), "seq": seq}
        # Known from an earlier moment and read by nobody here: what the store has now is
        # the truth, and nothing was told from the state it had (a ``subscribe_all`` told of
        # it from now on is told from this seq).
        combat.state = UNBUILT
        combat.views.clear()
        combat.seq = listed.seq
        combat.summary = listed.summary if isinstance(listed.summary, dict) else None
        return _stored_row(listed)
