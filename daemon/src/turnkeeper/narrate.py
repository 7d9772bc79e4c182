"""Events told as sentences a table can read: the narrated log of ``turnkeeper demo``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnkeeper_engine import State, d616_display
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import Check, RollOff


def _name(state: State, combatant_id: str | None) -> str:
    if combatant_id is None:
        return "someone"
    c = state.get(combatant_id)
    return c.name if c else combatant_id


def _names(state: State, ids: tuple[str, ...]) -> str:
    return ", ".join(_name(state, i) for i in ids) or "nobody"


def _check(check: Check) -> str:
    if check.dice == "d20":
        text = f"d20 {check.faces[0]} {check.modifier:+d} = {check.total}"
    else:
        text = f"d616 [{d616_display(check)}] {check.modifier:+d} = {check.total}"
        if check.ultimate:
            text += ", ULTIMATE FANTASTIC"
        elif check.fantastic:
            text += ", FANTASTIC"
    for r in check.rerolls:
        die = "Marvel die" if check.dice == "d616" and r.die == 2 else f"die {r.die + 1}"
        text += f"; {r.reason} rerolls {die}: {r.old} -> {r.new}, keeps {r.kept}"
    if check.supplied_by:
        text += f" (dice supplied by {check.supplied_by})"
    return text


def _rolloffs(state: State, rolloffs: tuple[RollOff, ...]) -> str:
    parts = []
    for r in rolloffs:
        for p in r.passes:
            rolls = ", ".join(f"{_name(state, i)} {face}" for i, face in p)
            parts.append(f"roll-off d{r.sides}: {rolls}")
    return "; ".join(parts)


def _started(state: State, e: ev.CombatStarted) -> str:
    text = f"Initiative order: {_names(state, e.order)}."
    if e.rolloffs:
        text += f" Ties broken by {_rolloffs(state, e.rolloffs)}."
    if e.bonus:
        text += f" Bonus round for {_names(state, e.bonus)}."
    return text


def _turn_started(state: State, e: ev.TurnStarted) -> str:
    label = {"normal": "turn", "held": "held turn", "floor": "turn at the delay floor"}[e.kind]
    return f"  {_name(state, e.combatant)}'s {label} begins."


def _sequence(state: State, e: ev.SequenceOrdered) -> str:
    if not e.checks:
        return f"  Reactions resolve in order: {_names(state, e.sequence)}."
    checks = "; ".join(f"{_name(state, i)} {_check(c)}" for i, c in e.checks)
    return f"  Fresh initiative for this sequence: {checks}. Order: {_names(state, e.sequence)}."


def _action(state: State, e: ev.ActionDeclared) -> str:
    what = e.action.description
    if not what:
        targets = f" at {_names(state, e.action.targets)}" if e.action.targets else ""
        what = f"{e.action.kind}{targets}"
    edge = " (with an edge: the target is Surprised)" if e.edges else ""
    return f"    {_name(state, e.combatant)} {what} [{e.action.type}]{edge}."


def _reserved(state: State, e: ev.ActionReserved) -> str:
    r = e.reservation
    verb = "reserves" if r.mode == "reserve" else "readies"
    what = r.action.description or r.action.kind
    return (
        f"    {_name(state, r.combatant)} {verb} a {r.reserved_type} action "
        f"({what}) until: {r.trigger.text}"
    )


_TELL: dict[type[ev.Event], Callable[[State, Any], str | None]] = {
    ev.CombatCreated: lambda s, e: f"== Combat {e.combat_id!r} under {e.ruleset} ==",
    ev.CombatantAdded: lambda s, e: (
        f"{e.combatant.name} joins" + (" (hidden)" if e.combatant.hidden else "") + "."
    ),
    ev.CombatantRevealed: lambda s, e: f"{e.combatant.name} is revealed.",
    ev.CombatantRemoved: lambda s, e: f"  {_name(s, e.combatant)} leaves the combat.",
    ev.CombatantDefeated: lambda s, e: f"  {_name(s, e.combatant)} is defeated.",
    ev.CombatantRevived: lambda s, e: f"  {_name(s, e.combatant)} is back in the fight.",
    ev.SurpriseMarked: lambda s, e: f"{_name(s, e.combatant)} is Surprised (one trouble).",
    ev.InitiativeRolled: lambda s, e: f"{_names(s, e.members)} initiative: {_check(e.check)}",
    ev.TiesOrdered: lambda s, e: f"Ties ordered: {_names(s, e.combatants)}.",
    ev.GroupReordered: lambda s, e: f"Group {e.group} acts as {_names(s, e.combatants)}.",
    ev.CombatStarted: _started,
    ev.CombatantSlotted: lambda s, e: (
        f"  {_name(s, e.combatant)} slots into the order: "
        + _names(s, e.order)
        + (" (its place has passed: first turn next round)." if e.passed else ".")
    ),
    ev.RoundStarted: lambda s, e: "-- Bonus round --" if e.round == 0 else f"-- Round {e.round} --",
    ev.TurnStarted: _turn_started,
    ev.TurnEnded: lambda s, e: (
        None if e.reason == "ended" else f"  {_name(s, e.combatant)}'s turn ends ({e.reason})."
    ),
    ev.TurnHeld: lambda s, e: (
        f"    {_name(s, e.combatant)} holds the turn"
        + (f" at {e.number}." if e.number is not None else ".")
    ),
    ev.HoldPlanned: lambda s, e: (
        None
        if e.when == "open"
        else f"    {_name(s, e.combatant)} will act {e.when} {_name(s, e.other)}."
    ),
    ev.HoldLapsed: lambda s, e: f"  {_name(s, e.combatant)}'s hold lapses: the time is lost.",
    ev.HoldCancelled: lambda s, e: f"  {_name(s, e.combatant)}'s hold is cancelled ({e.reason}).",
    ev.DelayForfeited: lambda s, e: f"  {_name(s, e.combatant)} forfeits the round's action.",
    ev.PlaceChanged: lambda s, e: (
        f"  {_name(s, e.combatant)} now acts at {e.place}: {_names(s, e.order)}."
    ),
    ev.TurnForgone: lambda s, e: f"  {_name(s, e.combatant)} gets no regular turn this round.",
    ev.ActionDeclared: _action,
    ev.ActionReserved: _reserved,
    ev.ActionCancelled: lambda s, e: (
        f"    {_name(s, e.combatant)}'s {e.action.kind} never happens ({e.reason})."
    ),
    ev.ReservationExpired: lambda s, e: f"  {_name(s, e.combatant)}'s reserved action expires.",
    ev.ReservationCancelled: lambda s, e: (
        f"  {_name(s, e.combatant)}'s reserved action is cancelled ({e.reason})."
    ),
    ev.WindowOpened: lambda s, e: (
        f"    Trigger! Reactions offered to {_names(s, e.window.offered)}."
    ),
    ev.ReactionClaimed: lambda s, e: f"    {_name(s, e.claim.combatant)} reacts.",
    ev.ReactionPassed: lambda s, e: f"    {_name(s, e.combatant)} lets it pass.",
    ev.SequenceOrdered: _sequence,
    ev.ReactionStarted: lambda s, e: (
        f"    >> {_name(s, e.combatant)} interrupts: {e.action.description or e.action.kind}."
    ),
    ev.ReactionCancelled: lambda s, e: (
        f"    {_name(s, e.combatant)}'s reaction is cancelled ({e.reason})."
    ),
    ev.SequenceEnded: lambda s, e: (
        "    The interrupted turn resumes." if s.turn is not None else None
    ),
    ev.ConditionApplied: lambda s, e: (
        f"  {_name(s, e.condition.target)} is {e.condition.type}"
        + (f" by {_names(s, e.condition.surprisers)}" if e.condition.surprisers else "")
        + "."
    ),
    ev.ConditionExpired: lambda s, e: f"  {_name(s, e.combatant)} is no longer {e.type}.",
    ev.ConditionRemoved: lambda s, e: (
        f"  {_name(s, e.combatant)} is no longer {e.type} ({e.reason})."
    ),
    ev.TurnTimerWarning: lambda s, e: f"  {_name(s, e.combatant)}: time is nearly up.",
    ev.TurnTimerExpired: lambda s, e: f"  {_name(s, e.combatant)}: time is up ({e.action}).",
    ev.OutcomeRecorded: lambda s, e: f"    {e.text}",
    ev.PluginDisabled: lambda s, e: f"  (plugin {e.plugin} is disabled here: {e.reason})",
    ev.PluginEnabled: lambda s, e: f"  (plugin {e.plugin} is enabled again)",
    ev.CombatEnded: lambda s, e: "== The combat is over ==",
    ev.CommandUndone: lambda s, e: f"  (the narrator undoes {e.command})",
}


def narrate(event: ev.Event, state: State) -> str | None:
    """One line for ``event``, or None for events a reader does not need (bookkeeping).
    ``state`` is the state after the event, for names."""
    tell = _TELL.get(type(event))
    return tell(state, event) if tell else None
