"""What each role may see (R16): hidden combatants and narrator-only details are filtered out
of every state view and event built for a player or an observer."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, replace
from functools import cache

from . import events as ev
from .model import (
    Actor,
    Claim,
    Clock,
    Combatant,
    Condition,
    Hold,
    OptionValue,
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
    disabled_plugins: tuple[str, ...] = ()
    options: tuple[tuple[str, OptionValue], ...] = ()
    """The combat's rule options as they are now (``set_turn_timer`` changes
    ``turn_time_limit``), every one with its value: a client offers what they allow."""
    reached: tuple[str, ...] = ()
    """Combatants whose turn has come this round (started, or forgone), sorted: with ``bonus``
    what a client needs to judge, as the engine does, whether a held turn's moment has passed."""
    bonus: tuple[str, ...] = ()
    """Who takes the bonus round (marvel, R7), as the combat started."""


def _hidden(state: State, actor: Actor) -> frozenset[str]:
    """Hidden combatants this actor may not see: a player always sees its own."""
    return frozenset(
        c.id
        for c in state.combatants
        if c.hidden and (c.controller is None or c.controller != actor.user)
    )


def _secret_reservation(state: State, combatant_id: str) -> bool:
    # What a narrator-run combatant has reserved or readied is the narrator's secret.
    c = state.get(combatant_id)
    return c is None or c.controller is None


def view(state: State, actor: Actor) -> View:
    """The state as ``actor`` may see it: everything for a narrator, otherwise without hidden
    combatants, any mention of them, and the reservations of narrator-run combatants."""
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
        state.disabled_plugins,
        state.options,
        tuple(sorted(state.reached)),
        state.bonus,
    )
    if actor.role == "narrator":
        return full
    hidden = _hidden(state, actor)
    window = state.window
    if window is not None and window.facts.actor in hidden:
        window = None
    elif window is not None:
        now = window.sequence[window.index] if window.index < len(window.sequence) else None
        # A hidden reactor's entry leaves the sequence: pointing at the entry after it would
        # name the wrong combatant as reacting, so the index points at no one.
        index = (
            -1
            if now in hidden
            else len([i for i in window.sequence[: window.index] if i not in hidden])
        )
        window = replace(
            window,
            offered=_not_secret(state, window.offered),
            passes=_not_secret(state, window.passes),
            claims=tuple(k for k in window.claims if not _secret_reservation(state, k.combatant)),
            index=index,
        )
    shown = replace(
        full,
        turn=None if state.turn and state.turn.combatant in hidden else state.turn,
        holds=tuple(_untargeted(h) if h.target in hidden else h for h in state.holds),
        reservations=tuple(
            r for r in state.reservations if not _secret_reservation(state, r.combatant)
        ),
        conditions=tuple(c for c in state.conditions if c.target not in hidden),
        window=window,
    )
    scrubbed = _scrub(shown, hidden)
    assert isinstance(scrubbed, View)
    # Options name no combatant, but their words could be a hidden one's id ("hold"): put back
    # whole, never scrubbed.
    return replace(scrubbed, options=state.options)


_SECRET_FOR_PLAYERS = (
    ev.ActionReserved,
    ev.ReservationExpired,
    ev.ReservationUsed,
    ev.ReservationCancelled,
    # Claiming or passing tells that a window was offered, which for a narrator-run combatant is
    # secret until its reaction resolves in the open (sequence_ordered, reaction_started).
    ev.ReactionClaimed,
    ev.ReactionPassed,
)


def _hidden_at(state: State, seq: int, actor: Actor) -> frozenset[str]:
    """Combatants hidden from this actor when event ``seq`` happened, whatever became of them
    since (R16): a player always sees its own."""
    return frozenset(
        s.combatant
        for s in state.secrets
        if s.covers(seq) and (s.controller is None or s.controller != actor.user)
    )


def visible(event: ev.Event, state: State, actor: Actor, seq: int | None = None) -> ev.Event | None:
    """``event`` as ``actor`` may see it, or None. ``seq`` is the event's number in the log:
    what was hidden then stays hidden, also once the combatant is revealed, undone, removed or
    defeated (R16); ``state`` is the latest state, which says whose reservations are secret.
    Without ``seq`` the event is judged by what ``state`` hides now (an event just folded)."""
    if actor.role == "narrator":
        return event
    hidden = _hidden(state, actor) if seq is None else _hidden_at(state, seq, actor)
    if any(s in hidden for s in event.subjects()):
        return None
    if isinstance(event, ev.HoldPlanned) and event.target in hidden:
        # Waiting on someone who is not there would tell that someone is.
        return None
    if isinstance(event, _SECRET_FOR_PLAYERS) and _secret_reservation(state, event.subjects()[0]):
        return None
    if isinstance(event, ev.WindowOpened):
        window = replace(event.window, offered=_not_secret(state, event.window.offered))
        event = replace(event, window=window)
    scrubbed = _scrub(event, hidden)
    return scrubbed if isinstance(scrubbed, ev.Event) else None


def _untargeted(hold: Hold) -> Hold:
    """A hold whose plan names a hidden combatant, as a player may see it: the plan it had
    before (its named number, if any), never "before"/"after" no one."""
    return replace(hold, plan="at" if hold.number is not None else None, target=None)


def _not_secret(state: State, offered: tuple[str, ...]) -> tuple[str, ...]:
    # Being offered a window tells that a reservation matched: a narrator-run one is secret.
    return tuple(i for i in offered if not _secret_reservation(state, i))


class _Drop:
    """Marks a value that cannot be shown without naming a hidden combatant."""


_DROP = _Drop()

_IDENTITY: dict[type, str] = {
    Combatant: "id",
    Hold: "combatant",
    Reservation: "combatant",
    Condition: "target",
    Clock: "anchor",
    Claim: "combatant",
}
"""The field that says whose a value is: a value belonging to a hidden combatant goes."""


@cache
def _optional_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(name for name, tp in hints.items() if type(None) in typing.get_args(tp))


def _is_pair(value: object) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)


def _scrub(value: object, hidden: frozenset[str]) -> object:
    """``value`` with every mention of a hidden combatant taken out: items of a sequence (ids,
    ``(id, …)`` pairs, values that belong to them) are dropped, optional references become
    None, and a value whose required field names one cannot be shown at all."""
    if not hidden or isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, tuple):
        kept = []
        for item in value:
            # Edges read "<source>:<combatant>", e.g. "surprised:doom".
            if isinstance(item, str) and (item in hidden or item.partition(":")[2] in hidden):
                continue
            if isinstance(item, tuple) and item and isinstance(item[0], str) and item[0] in hidden:
                continue
            owner = _IDENTITY.get(type(item))
            if owner is not None and getattr(item, owner) in hidden:
                continue
            scrubbed = _scrub(item, hidden)
            # A (name, value) pair that lost its value to the scrub says nothing without it,
            # and a pair of one item is not a pair: it goes whole.
            pair_broken = _is_pair(item) and not _is_pair(scrubbed)
            if scrubbed is not _DROP and not pair_broken:
                kept.append(scrubbed)
        return tuple(kept)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, object] = {}
        for f in dataclasses.fields(value):
            current = getattr(value, f.name)
            if isinstance(current, str) and current in hidden:
                if f.name not in _optional_fields(type(value)):
                    return _DROP
                changes[f.name] = None
                continue
            scrubbed = _scrub(current, hidden)
            if scrubbed is _DROP:
                return _DROP
            if scrubbed != current:
                changes[f.name] = scrubbed
        return replace(value, **changes) if changes else value
    return value
