"""What each role may see (R16): hidden combatants and narrator-only details are filtered out
of every state view and event built for a player or an observer."""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import events as ev
from .model import (
    Actor,
    Combatant,
    Condition,
    Hold,
    Phase,
    Reservation,
    State,
    Turn,
    Window,
)


@dataclass(frozen=True, slots=True)
class View:
    """A combat as one actor may see it."""

    combat_id: str
    ruleset: str
    phase: Phase
    round: int | None
    turn: Turn | None
    combatants: tuple[Combatant, ...]
    order: tuple[str, ...]
    holds: tuple[Hold, ...]
    reservations: tuple[Reservation, ...]
    conditions: tuple[Condition, ...]
    window: Window | None


def _hidden(state: State) -> frozenset[str]:
    return frozenset(c.id for c in state.combatants if c.hidden)


def _secret_reservation(state: State, combatant_id: str) -> bool:
    # What a narrator-run combatant has reserved or readied is the narrator's secret.
    c = state.get(combatant_id)
    return c is None or c.controller is None


def view(state: State, actor: Actor) -> View:
    """The state as ``actor`` may see it: everything for a narrator, otherwise without hidden
    combatants, anything about them, and the reservations of narrator-run combatants."""
    full = View(
        state.combat_id,
        state.ruleset,
        state.phase,
        state.round,
        state.turn,
        state.combatants,
        state.order,
        state.holds,
        state.reservations,
        state.conditions,
        state.window,
    )
    if actor.role == "narrator":
        return full
    hidden = _hidden(state)
    window = state.window
    if window is not None:
        if window.facts.actor in hidden:
            window = None
        else:
            window = replace(
                window,
                offered=tuple(i for i in window.offered if i not in hidden),
                claims=tuple(c for c in window.claims if c.combatant not in hidden),
                passes=tuple(i for i in window.passes if i not in hidden),
                sequence=tuple(i for i in window.sequence if i not in hidden),
            )
    return replace(
        full,
        turn=None if state.turn and state.turn.combatant in hidden else state.turn,
        combatants=tuple(c for c in state.combatants if c.id not in hidden),
        order=tuple(i for i in state.order if i not in hidden),
        holds=tuple(h for h in state.holds if h.combatant not in hidden),
        reservations=tuple(
            r for r in state.reservations if not _secret_reservation(state, r.combatant)
        ),
        conditions=tuple(
            replace(c, surprisers=tuple(i for i in c.surprisers if i not in hidden))
            for c in state.conditions
            if c.target not in hidden
        ),
        window=window,
    )


_SECRET_FOR_PLAYERS = (
    ev.ActionReserved,
    ev.ReservationExpired,
    ev.ReservationUsed,
    ev.ReservationCancelled,
)


def visible(event: ev.Event, state: State, actor: Actor) -> ev.Event | None:
    """``event`` as ``actor`` may see it, or None. ``state`` is the state right after the event
    (so a reveal is visible, and what was hidden before it is not)."""
    if actor.role == "narrator":
        return event
    hidden = _hidden(state)
    if any(s in hidden for s in event.subjects()):
        return None
    if isinstance(event, _SECRET_FOR_PLAYERS) and _secret_reservation(state, event.subjects()[0]):
        return None

    def strip(ids: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(i for i in ids if i not in hidden)

    if isinstance(event, ev.CombatStarted):
        return replace(event, order=strip(event.order), bonus=strip(event.bonus))
    if isinstance(event, ev.CombatantSlotted | ev.PlaceChanged):
        return replace(event, order=strip(event.order))
    if isinstance(event, ev.WindowOpened):
        return replace(event, window=replace(event.window, offered=strip(event.window.offered)))
    if isinstance(event, ev.SequenceOrdered):
        return replace(
            event,
            sequence=strip(event.sequence),
            checks=tuple((i, c) for i, c in event.checks if i not in hidden),
        )
    if isinstance(event, ev.ConditionApplied):
        return replace(
            event,
            condition=replace(event.condition, surprisers=strip(event.condition.surprisers)),
        )
    return event
