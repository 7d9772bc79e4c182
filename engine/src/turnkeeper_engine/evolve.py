"""``evolve(state, event) -> state``: the only way a state changes. Pure and total over events."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from . import events as ev
from .model import Clock, Condition, Hold, Secret, State, Turn, Window

_NOT_UNDOABLE = frozenset({"undo", "create_combat"})
"""Undo is itself never undone, and a combat's creation is where undo stops (R15)."""

UNDO_DEPTH = 200
"""Commands a narrator can undo in a row (R15); older states are let go to bound memory."""


def _set(state: State, combatant_id: str, **changes: Any) -> State:
    return replace(
        state,
        combatants=tuple(
            replace(c, **changes) if c.id == combatant_id else c for c in state.combatants
        ),
    )


def _window(state: State, **changes: Any) -> State:
    assert state.window is not None, "window event without an open window"
    return replace(state, window=replace(state.window, **changes))


def tick_clocks(state: State, combatant_id: str, boundary: str) -> State:
    """Count a turn boundary of ``combatant_id`` down on every condition anchored to it."""

    def tick(clock: Clock) -> Clock:
        if clock.anchor != combatant_id or clock.boundary != boundary or clock.remaining == 0:
            return clock
        if clock.skip:
            return replace(clock, skip=False)
        return replace(clock, remaining=clock.remaining - 1)

    def condition(c: Condition) -> Condition:
        return replace(c, clocks=tuple(tick(k) for k in c.clocks))

    return replace(state, conditions=tuple(condition(c) for c in state.conditions))


def _reorder_members(ids: tuple[str, ...], members: tuple[str, ...]) -> tuple[str, ...]:
    """Put ``members`` in the slots they already occupy in ``ids``, in the given sequence."""
    slots = iter(members)
    return tuple(next(slots) if i in members else i for i in ids)


def _reorder_group(state: State, e: ev.GroupReordered) -> State:
    by_id = {c.id: c for c in state.combatants}
    ids = _reorder_members(tuple(by_id), e.combatants)
    return replace(
        state,
        combatants=tuple(by_id[i] for i in ids),
        order=_reorder_members(state.order, e.combatants) if state.order else state.order,
    )


def _turn_started(state: State, e: ev.TurnStarted) -> State:
    # A held turn taken later in the round is the round's turn resuming: clocks that count the
    # starts of its turns count the round once (R13).
    first_start = e.combatant not in state.reached
    state = replace(
        state,
        turn=Turn(
            e.round,
            e.combatant,
            e.kind,
            e.at,
            deadline=e.deadline,
            warn_at=e.warn_at,
            number=state.turns + 1 if e.number is None else e.number,
        ),
        turns=state.turns + 1,
        reached=state.reached | {e.combatant},
        holds=tuple(h for h in state.holds if h.combatant != e.combatant),
    )
    return tick_clocks(state, e.combatant, "start") if first_start else state


def _turn_ended(state: State, e: ev.TurnEnded) -> State:
    return tick_clocks(replace(state, turn=None), e.combatant, "end")


def _turn_held(state: State, e: ev.TurnHeld) -> State:
    hold = Hold(e.combatant, e.ordinal, e.round, e.number, "at" if e.number is not None else None)
    return replace(state, turn=None, holds=(*state.holds, hold), serial=state.serial + 1)


def _hold_planned(state: State, e: ev.HoldPlanned) -> State:
    def plan(h: Hold) -> Hold:
        if h.combatant != e.combatant:
            return h
        # Only a reset recorded before plans were told as ``at`` (``when: "open"``, see
        # ``plain.event_from_plain``) has no plan for a holder that named a number.
        plan = "at" if e.plan is None and h.number is not None else e.plan
        return replace(h, plan=plan, target=e.target)

    return replace(state, holds=tuple(plan(h) for h in state.holds))


def _without_hold(state: State, combatant_id: str) -> State:
    return replace(state, holds=tuple(h for h in state.holds if h.combatant != combatant_id))


def _without_reservation(state: State, reservation_id: str) -> State:
    return replace(
        state, reservations=tuple(r for r in state.reservations if r.id != reservation_id)
    )


def _used(state: State, action_type: str | None) -> State:
    if state.turn is None or action_type is None:
        return state
    return replace(state, turn=replace(state.turn, used=(*state.turn.used, action_type)))


def _action_declared(state: State, e: ev.ActionDeclared) -> State:
    # Actions taken while reacting spend the reaction, not the interrupted turn's budget.
    if state.turn is None or state.turn.combatant != e.combatant:
        return state
    state = _used(state, e.action.type)
    if e.action.kind == "refocus":
        state = replace(state, turn=replace(_t(state), refocus=True))
    return state


def _reaction_cancelled(state: State, e: ev.ReactionCancelled) -> State:
    w = state.window
    assert w is not None
    if e.combatant not in w.sequence:
        # Cancelled before the window closed: the claim itself goes.
        return _window(state, claims=tuple(c for c in w.claims if c.combatant != e.combatant))
    position = w.sequence.index(e.combatant)
    sequence = tuple(c for c in w.sequence if c != e.combatant)
    return _window(state, sequence=sequence, index=w.index - (position < w.index))


def _window_closed(state: State, e: ev.WindowClosed) -> State:
    w = state.window
    assert w is not None
    return replace(state, window=replace(w, status="resolving") if w.claims else None)


def _condition_gone(state: State, condition_id: str) -> State:
    return replace(state, conditions=tuple(c for c in state.conditions if c.id != condition_id))


def _undo(state: State) -> State:
    previous = state.undo[-1]
    return replace(previous, undo=state.undo[:-1])


_FOLD: dict[type[ev.Event], Callable[[State, Any], State]] = {
    ev.CombatCreated: lambda s, e: replace(
        s, combat_id=e.combat_id, ruleset=e.ruleset, options=e.options, phase="setup"
    ),
    ev.CombatantAdded: lambda s, e: replace(s, combatants=(*s.combatants, e.combatant)),
    ev.CombatantRevealed: lambda s, e: _set(s, e.combatant.id, hidden=False),
    ev.CombatantRemoved: lambda s, e: replace(
        _set(s, e.combatant, status="removed"), order=tuple(i for i in s.order if i != e.combatant)
    ),
    ev.CombatantDefeated: lambda s, e: _set(s, e.combatant, status="defeated"),
    ev.CombatantRevived: lambda s, e: _set(s, e.combatant, status="active"),
    ev.SurpriseMarked: lambda s, e: _set(s, e.combatant, surprised=True),
    ev.InitiativeRolled: lambda s, e: replace(
        s,
        phase="initiative" if s.phase == "setup" else s.phase,
        combatants=tuple(
            replace(c, check=e.check, place=e.check.total) if c.id in e.members else c
            for c in s.combatants
        ),
    ),
    ev.TiesOrdered: lambda s, e: replace(
        s, tie_order=(*(i for i in s.tie_order if i not in e.combatants), *e.combatants)
    ),
    ev.GroupReordered: _reorder_group,
    ev.CombatStarted: lambda s, e: replace(
        s, order=e.order, bonus=e.bonus, phase="bonus_round" if e.bonus else "rounds"
    ),
    ev.CombatantSlotted: lambda s, e: replace(
        s, order=e.order, reached=s.reached | {e.combatant} if e.passed else s.reached
    ),
    ev.RoundStarted: lambda s, e: replace(
        s,
        round=e.round,
        reached=frozenset(),
        phase="bonus_round" if e.round == 0 else "rounds",
    ),
    ev.RoundEnded: lambda s, e: s,
    ev.TurnStarted: _turn_started,
    ev.TurnEnded: _turn_ended,
    ev.TurnHeld: _turn_held,
    ev.HoldPlanned: _hold_planned,
    ev.HoldLapsed: lambda s, e: _without_hold(s, e.combatant),
    ev.HoldCancelled: lambda s, e: _without_hold(s, e.combatant),
    ev.DelayForfeited: lambda s, e: s,
    ev.PlaceChanged: lambda s, e: replace(_set(s, e.combatant, place=e.place), order=e.order),
    ev.TurnForgone: lambda s, e: replace(s, reached=s.reached | {e.combatant}),
    ev.ReactionRefreshed: lambda s, e: _set(s, e.combatant, reaction=True),
    ev.ReactionSpent: lambda s, e: _set(s, e.combatant, reaction=False),
    ev.ActionDeclared: _action_declared,
    ev.ActionResolved: lambda s, e: s,
    ev.ActionCancelled: lambda s, e: s,
    ev.ActionReserved: lambda s, e: replace(
        _used(s, e.reservation.reserved_type),
        reservations=(*s.reservations, e.reservation),
        serial=s.serial + 1,
    ),
    ev.ReservationExpired: lambda s, e: _without_reservation(s, e.reservation),
    ev.ReservationUsed: lambda s, e: _without_reservation(s, e.reservation),
    ev.ReservationCancelled: lambda s, e: _without_reservation(s, e.reservation),
    ev.WindowOpened: lambda s, e: replace(s, window=e.window, serial=s.serial + 1),
    ev.ReactionClaimed: lambda s, e: _window(s, claims=(*_w(s).claims, e.claim)),
    ev.ReactionPassed: lambda s, e: _window(s, passes=(*_w(s).passes, e.combatant)),
    ev.WindowClosed: _window_closed,
    ev.SequenceOrdered: lambda s, e: _window(s, sequence=e.sequence, index=0),
    ev.ReactionStarted: lambda s, e: s,
    ev.ReactionFinished: lambda s, e: _window(s, index=_w(s).index + 1),
    ev.ReactionCancelled: _reaction_cancelled,
    ev.SequenceEnded: lambda s, e: replace(s, window=None),
    ev.ConditionApplied: lambda s, e: replace(
        s,
        conditions=(*(c for c in s.conditions if c.id != e.condition.id), e.condition),
        serial=s.serial + 1,
    ),
    ev.ConditionExpired: lambda s, e: _condition_gone(s, e.condition),
    ev.ConditionRemoved: lambda s, e: _condition_gone(s, e.condition),
    ev.TurnTimerWarning: lambda s, e: replace(s, turn=replace(_t(s), warned=True)),
    ev.TurnTimerExpired: lambda s, e: s,
    ev.OutcomeRecorded: lambda s, e: s,
    ev.PluginDisabled: lambda s, e: replace(
        s, disabled_plugins=(*(p for p in s.disabled_plugins if p != e.plugin), e.plugin)
    ),
    ev.PluginEnabled: lambda s, e: replace(
        s, disabled_plugins=tuple(p for p in s.disabled_plugins if p != e.plugin)
    ),
    ev.CombatEnded: lambda s, e: replace(s, phase="ended", turn=None, window=None),
}


def _w(state: State) -> Window:
    assert state.window is not None
    return state.window


def _t(state: State) -> Turn:
    assert state.turn is not None
    return state.turn


def _secrets(state: State, after: State, event: ev.Event, seq: int) -> tuple[Secret, ...]:
    """The record of hidden stretches once ``event`` (number ``seq``) is folded into ``after``:
    a hidden combatant's stretch begins with its addition and ends with its reveal, or when an
    undo takes it away or makes it visible; an undo that brings one back hidden begins another."""
    secrets = state.secrets
    if isinstance(event, ev.CombatantRevealed):
        gone = {event.combatant.id}
    elif isinstance(event, ev.CombatantAdded):
        c = event.combatant
        return (*secrets, Secret(c.id, c.controller, seq)) if c.hidden else secrets
    elif isinstance(event, ev.CommandUndone):
        hidden = {c.id: c.controller for c in after.combatants if c.hidden}
        gone = {s.combatant for s in secrets if s.until is None and s.combatant not in hidden}
        still = {s.combatant for s in secrets if s.until is None} - gone
        fresh = tuple(Secret(i, who, seq) for i, who in hidden.items() if i not in still)
        secrets = (*secrets, *fresh)
    else:
        return secrets
    return tuple(
        replace(s, until=seq) if s.until is None and s.combatant in gone else s for s in secrets
    )


def evolve(state: State, event: ev.Event) -> State:
    """Fold one event into the state. Never fails on events ``decide`` produced."""
    if isinstance(event, ev.CommandRecorded):
        if event.command in _NOT_UNDOABLE:
            after = state
        else:
            kept = state.undo[-(UNDO_DEPTH - 1) :]
            snapshot = replace(state, undo=())
            after = replace(state, undo=(*kept, snapshot), last_command=event.command)
    elif isinstance(event, ev.CommandUndone):
        after = _undo(state)
    else:
        after = _FOLD[type(event)](state, event)
    seq = state.seq + 1
    secrets = _secrets(state, after, event, seq)
    if after is state:
        return replace(state, seq=seq, secrets=secrets)
    # ``after`` was made just now for this event and nothing else holds it yet: the log's
    # fields are set on it rather than the whole state copied once more (replay speed).
    object.__setattr__(after, "seq", seq)
    object.__setattr__(after, "secrets", secrets)
    return after


def fold(events: Iterable[ev.Event], state: State | None = None) -> State:
    """Replay events from an empty state (or from ``state``)."""
    result = state if state is not None else State()
    for event in events:
        result = evolve(result, event)
    return result
