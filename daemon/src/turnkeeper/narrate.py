"""Events told as sentences a table can read: the narrated log of ``turnkeeper demo``, and the
``summary`` a narrated session gets with each event.

Every sentence is a template in English with named pieces (names, numbers, rule words),
translated by ``turnkeeper.i18n``; the layout of the log (indentation, ``==`` and ``--`` rules)
is not text and stays out of the templates. Where a ruleset has its own word for a rule (D&D 3e
delays a turn and readies an action where Marvel holds and reserves), the sentence uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnkeeper_engine import RuleBook, State, d616_display
from turnkeeper_engine import events as ev
from turnkeeper_engine.errors import Arg
from turnkeeper_engine.model import ActionSpec, Check, RollOff

from . import i18n


class _Teller:
    """One event's telling: the state for names, the locale and the ruleset for words."""

    def __init__(self, state: State, locale: str, book: RuleBook) -> None:
        self.state = state
        self.locale = locale
        self.book = book
        rules = book.ruleset(state.ruleset)
        self.delays = rules is not None and not rules.holds_carry_over
        """A hold is a D&D 3e delay: it never lasts past the round."""
        self.readies = rules is not None and rules.reserve_mode == "ready"
        self.refocuses = rules is not None and rules.refocus

    def say(self, template: str, **args: Arg) -> str:
        """``template`` (a string literal) in this telling's language, filled in."""
        return i18n.message(self.locale, template, args)

    def name(self, combatant_id: str | None) -> str:
        if combatant_id is None:
            return self.say("someone")
        c = self.state.get(combatant_id)
        return c.name if c else combatant_id

    def names(self, ids: tuple[str, ...]) -> str:
        return ", ".join(self.name(i) for i in ids) or self.say("nobody")

    def what(self, action: ActionSpec) -> str:
        """What an action does: its description as the table typed it, else its kind in this
        language's word, with its targets."""
        if action.description:
            return action.description
        if action.targets:
            return self.say(
                "{action_kind} targeting {names}",
                action_kind=action.kind,
                names=self.names(action.targets),
            )
        return i18n.term(self.locale, "action_kind", action.kind)


def _check(s: _Teller, check: Check) -> str:
    if check.dice == "d20":
        text = f"d20 {check.faces[0]} {check.modifier:+d} = {check.total}"
    else:
        text = f"d616 [{d616_display(check)}] {check.modifier:+d} = {check.total}"
        if check.ultimate:
            text += ", " + s.say("ULTIMATE FANTASTIC")
        elif check.fantastic:
            text += ", " + s.say("FANTASTIC")
    for r in check.rerolls:
        moved = {"reroll": r.reason, "old": r.old, "new": r.new, "kept": r.kept}
        if check.dice == "d616" and r.die == 2:
            text += "; " + s.say(
                "{reroll} rerolls Marvel die: {old} -> {new}, keeps {kept}", **moved
            )
        else:
            text += "; " + s.say(
                "{reroll} rerolls die {die}: {old} -> {new}, keeps {kept}", die=r.die + 1, **moved
            )
    who = check.supplied_by
    if who is not None and who in i18n.TERMS["role"]:
        # The role that rolled, for an actor without a user id: a rule word to translate.
        text += " " + s.say("(dice supplied by the {who_role})", who_role=who)
    elif who:
        text += " " + s.say("(dice supplied by {who})", who=who)
    return text


def _rolloffs(s: _Teller, rolloffs: tuple[RollOff, ...]) -> str:
    parts = []
    for r in rolloffs:
        for p in r.passes:
            rolls = ", ".join(f"{s.name(i)} {face}" for i, face in p)
            parts.append(s.say("roll-off d{sides}: {rolls}", sides=r.sides, rolls=rolls))
    return "; ".join(parts)


def _created(s: _Teller, e: ev.CombatCreated) -> str:
    rules = s.book.ruleset(e.ruleset)
    title = rules.title if rules is not None else e.ruleset
    return "== " + s.say("Combat {id!r} ({ruleset})", id=e.combat_id, ruleset=title) + " =="


def _added(s: _Teller, e: ev.CombatantAdded) -> str:
    if e.combatant.hidden:
        return s.say("{name} joins (hidden).", name=e.combatant.name)
    return s.say("{name} joins.", name=e.combatant.name)


def _started(s: _Teller, e: ev.CombatStarted) -> str:
    parts = [s.say("Initiative order: {names}.", names=s.names(e.order))]
    if e.rolloffs:
        parts.append(s.say("Ties broken by {rolloffs}.", rolloffs=_rolloffs(s, e.rolloffs)))
    if e.bonus:
        parts.append(s.say("Bonus round for {names}.", names=s.names(e.bonus)))
    return " ".join(parts)


def _slotted(s: _Teller, e: ev.CombatantSlotted) -> str:
    name, order = s.name(e.combatant), s.names(e.order)
    if e.passed:
        return "  " + s.say(
            "{name} slots into the order: {names} (its place has passed: first turn next round).",
            name=name,
            names=order,
        )
    return "  " + s.say("{name} slots into the order: {names}.", name=name, names=order)


def _round(s: _Teller, e: ev.RoundStarted) -> str:
    if e.round == 0:
        return "-- " + s.say("Bonus round") + " --"
    return "-- " + s.say("Round {n}", n=e.round) + " --"


def _turn_started(s: _Teller, e: ev.TurnStarted) -> str:
    name = s.name(e.combatant)
    if e.kind == "floor":
        return "  " + s.say("{name}'s turn at the delay floor begins.", name=name)
    if e.kind == "held" and s.delays:
        return "  " + s.say("{name}'s delayed turn begins.", name=name)
    if e.kind == "held":
        return "  " + s.say("{name}'s held turn begins.", name=name)
    return "  " + s.say("{name}'s turn begins.", name=name)


def _turn_ended(s: _Teller, e: ev.TurnEnded) -> str | None:
    if e.reason == "ended":
        return None
    return "  " + s.say("{name}'s turn ends ({reason}).", name=s.name(e.combatant), reason=e.reason)


def _held(s: _Teller, e: ev.TurnHeld) -> str:
    name = s.name(e.combatant)
    if s.delays and e.number is not None:
        return "    " + s.say("{name} delays the turn to {number}.", name=name, number=e.number)
    if s.delays:
        return "    " + s.say("{name} delays the turn.", name=name)
    if e.number is not None:
        return "    " + s.say("{name} holds the turn at {number}.", name=name, number=e.number)
    return "    " + s.say("{name} holds the turn.", name=name)


def _planned(s: _Teller, e: ev.HoldPlanned) -> str | None:
    if e.target is None:  # a plan reset to the named number, or to nothing said yet
        return None
    name, other = s.name(e.combatant), s.name(e.target)
    if e.plan == "before":
        return "    " + s.say("{name} will act before {other}.", name=name, other=other)
    if e.plan == "after":
        return "    " + s.say("{name} will act after {other}.", name=name, other=other)
    return None


def _lapsed(s: _Teller, e: ev.HoldLapsed) -> str:
    name = s.name(e.combatant)
    if s.delays:
        return "  " + s.say("{name}'s delay lapses: the time is lost.", name=name)
    return "  " + s.say("{name}'s hold lapses: the time is lost.", name=name)


def _hold_cancelled(s: _Teller, e: ev.HoldCancelled) -> str:
    name = s.name(e.combatant)
    if s.delays:
        return "  " + s.say("{name}'s delay is cancelled ({reason}).", name=name, reason=e.reason)
    return "  " + s.say("{name}'s hold is cancelled ({reason}).", name=name, reason=e.reason)


def _action(s: _Teller, e: ev.ActionDeclared) -> str:
    name, kind = s.name(e.combatant), e.action.type or ""
    if e.action.kind == "refocus" and s.refocuses:
        return "    " + s.say(
            "{name} refocuses [{action_type} action].", name=name, action_type=kind
        )
    pieces: dict[str, Arg] = {"name": name, "action": s.what(e.action), "action_type": kind}
    # A description is the table's own verb phrase ("swings at Sabretooth"); without one, the
    # action is named by its kind ("Spider-Man: attack targeting Sabretooth").
    if e.edges and e.action.description:
        return "    " + s.say(
            "{name} {action} [{action_type} action] (with an edge: the target is Surprised).",
            **pieces,
        )
    if e.edges:
        return "    " + s.say(
            "{name}: {action} [{action_type} action] (with an edge: the target is Surprised).",
            **pieces,
        )
    if e.action.description:
        return "    " + s.say("{name} {action} [{action_type} action].", **pieces)
    return "    " + s.say("{name}: {action} [{action_type} action].", **pieces)


def _reserved(s: _Teller, e: ev.ActionReserved) -> str:
    r = e.reservation
    pieces: dict[str, Arg] = {
        "name": s.name(r.combatant),
        "action_type": r.reserved_type,
        "action": s.what(r.action),
        "trigger": r.trigger.text,
    }
    if r.mode == "ready":
        return "    " + s.say(
            "{name} readies a {action_type} action ({action}), with the trigger: {trigger}",
            **pieces,
        )
    return "    " + s.say(
        "{name} reserves a {action_type} action ({action}), with the trigger: {trigger}", **pieces
    )


def _expired(s: _Teller, e: ev.ReservationExpired) -> str:
    name = s.name(e.combatant)
    if s.readies:
        return "  " + s.say("{name}'s readied action expires.", name=name)
    return "  " + s.say("{name}'s reserved action expires.", name=name)


def _reservation_cancelled(s: _Teller, e: ev.ReservationCancelled) -> str:
    name, reason = s.name(e.combatant), e.reason
    if s.readies:
        return "  " + s.say(
            "{name}'s readied action is cancelled ({reason}).", name=name, reason=reason
        )
    return "  " + s.say(
        "{name}'s reserved action is cancelled ({reason}).", name=name, reason=reason
    )


def _sequence(s: _Teller, e: ev.SequenceOrdered) -> str | None:
    if not e.sequence:
        # Only combatants this reader may not see claimed (R16): nothing to tell it.
        return None
    order = s.names(e.sequence)
    if not e.checks:
        return "  " + s.say("Reactions resolve in order: {names}.", names=order)
    checks = "; ".join(f"{s.name(i)} {_check(s, c)}" for i, c in e.checks)
    return "  " + s.say(
        "Fresh initiative for this sequence: {checks}. Order: {names}.", checks=checks, names=order
    )


def _condition_gone(s: _Teller, e: ev.ConditionExpired | ev.ConditionRemoved) -> str:
    name = s.name(e.combatant)
    # Only the narrator removes a condition (its reason is always "removed"): told as the
    # narrator's decision, as "removed" reads "left the combat" among the reasons.
    reason = "narrator" if isinstance(e, ev.ConditionRemoved) else None
    if e.type == "custom" and reason is not None:
        # A narrator's own condition is known by its note, which the event does not carry:
        # "is no longer custom" would name a protocol value, not the condition.
        return "  " + s.say("{name}'s condition is removed ({reason}).", name=name, reason=reason)
    if e.type == "custom":
        return "  " + s.say("{name}'s condition ends.", name=name)
    if reason is not None:
        return "  " + s.say(
            "{name} is no longer {condition} ({reason}).",
            name=name,
            condition=e.type,
            reason=reason,
        )
    return "  " + s.say("{name} is no longer {condition}.", name=name, condition=e.type)


def _condition(s: _Teller, e: ev.ConditionApplied) -> str:
    k = e.condition
    if k.surprisers:
        return "  " + s.say(
            "{name} is {condition} by {names}.",
            name=s.name(k.target),
            condition=k.type,
            names=s.names(k.surprisers),
        )
    if k.note:
        # A narrator's own condition reads by its note ("Webbed to the wall"), not its type.
        return "  " + s.say("{name}: {note}.", name=s.name(k.target), note=k.note.rstrip("."))
    if k.type == "custom":
        return "  " + s.say("{name} gets a custom condition.", name=s.name(k.target))
    return "  " + s.say("{name} is {condition}.", name=s.name(k.target), condition=k.type)


def _outcome(s: _Teller, e: ev.OutcomeRecorded) -> str:
    # A plugin's template is in the catalogues when the plugin is bundled (i18n.SOURCES); any
    # other is told in English, which is its text. The engine checked that the template and
    # its args make the text.
    if e.template:
        return "    " + i18n.message(s.locale, e.template, e.args)
    return "    " + e.text


_TELL: dict[type[ev.Event], Callable[[_Teller, Any], str | None]] = {
    ev.CombatCreated: _created,
    ev.CombatantAdded: _added,
    ev.CombatantRevealed: lambda s, e: s.say("{name} is revealed.", name=e.combatant.name),
    ev.CombatantRemoved: lambda s, e: (
        "  " + s.say("{name} leaves the combat.", name=s.name(e.combatant))
    ),
    ev.CombatantDefeated: lambda s, e: (
        "  " + s.say("{name} is defeated.", name=s.name(e.combatant))
    ),
    ev.CombatantRevived: lambda s, e: (
        "  " + s.say("{name} is back in the fight.", name=s.name(e.combatant))
    ),
    ev.SurpriseMarked: lambda s, e: s.say(
        "{name} is Surprised (one trouble).", name=s.name(e.combatant)
    ),
    ev.InitiativeRolled: lambda s, e: s.say(
        "{names} initiative: {check}", names=s.names(e.members), check=_check(s, e.check)
    ),
    ev.TiesOrdered: lambda s, e: s.say("Ties ordered: {names}.", names=s.names(e.combatants)),
    ev.GroupReordered: lambda s, e: s.say(
        "The group acts in this order: {names}.", names=s.names(e.combatants)
    ),
    ev.CombatStarted: _started,
    ev.CombatantSlotted: _slotted,
    ev.RoundStarted: _round,
    ev.TurnStarted: _turn_started,
    ev.TurnEnded: _turn_ended,
    ev.TurnHeld: _held,
    ev.HoldPlanned: _planned,
    ev.HoldLapsed: _lapsed,
    ev.HoldCancelled: _hold_cancelled,
    ev.DelayForfeited: lambda s, e: (
        "  " + s.say("{name} forfeits the round's action.", name=s.name(e.combatant))
    ),
    ev.PlaceChanged: lambda s, e: (
        "  "
        + s.say(
            "{name} now acts at {place}: {names}.",
            name=s.name(e.combatant),
            place=e.place,
            names=s.names(e.order),
        )
    ),
    ev.TurnForgone: lambda s, e: (
        "  " + s.say("{name} gets no regular turn this round.", name=s.name(e.combatant))
    ),
    ev.ActionDeclared: _action,
    ev.ActionReserved: _reserved,
    ev.ActionCancelled: lambda s, e: (
        "    "
        + s.say(
            "{name}'s action never happens ({reason}): {action}.",
            name=s.name(e.combatant),
            action=s.what(e.action),
            reason=e.reason,
        )
    ),
    ev.ReservationExpired: _expired,
    ev.ReservationCancelled: _reservation_cancelled,
    ev.WindowOpened: lambda s, e: (
        "    " + s.say("Trigger! Reactions offered to {names}.", names=s.names(e.window.offered))
    ),
    ev.ReactionClaimed: lambda s, e: (
        "    " + s.say("{name} reacts.", name=s.name(e.claim.combatant))
    ),
    ev.ReactionPassed: lambda s, e: (
        "    " + s.say("{name} lets it pass.", name=s.name(e.combatant))
    ),
    ev.SequenceOrdered: _sequence,
    ev.ReactionStarted: lambda s, e: (
        "    >> "
        + s.say(
            "{name} interrupts: {action}.",
            name=s.name(e.combatant),
            action=s.what(e.action),
        )
    ),
    ev.ReactionCancelled: lambda s, e: (
        "    "
        + s.say(
            "{name}'s reaction is cancelled ({reason}).", name=s.name(e.combatant), reason=e.reason
        )
    ),
    ev.SequenceEnded: lambda s, e: (
        "    " + s.say("The interrupted turn resumes.") if s.state.turn is not None else None
    ),
    ev.ConditionApplied: _condition,
    ev.ConditionExpired: _condition_gone,
    ev.ConditionRemoved: _condition_gone,
    ev.TurnTimerWarning: lambda s, e: (
        "  " + s.say("{name}: time is nearly up.", name=s.name(e.combatant))
    ),
    # What the expiry does (a hold, an end of turn) is told by the events that follow.
    ev.TurnTimerExpired: lambda s, e: "  " + s.say("{name}: time is up.", name=s.name(e.combatant)),
    ev.TurnTimerSet: lambda s, e: (
        "  " + s.say("The turn timer is off.")
        if e.seconds is None
        else "  " + s.say("Turn timer: {seconds} s a turn, from the next turn.", seconds=e.seconds)
    ),
    ev.OutcomeRecorded: _outcome,
    ev.PluginDisabled: lambda s, e: (
        "  "
        + s.say("(plugin {plugin} is disabled here: {reason})", plugin=e.plugin, reason=e.reason)
    ),
    ev.PluginEnabled: lambda s, e: (
        "  " + s.say("(plugin {plugin} is enabled again)", plugin=e.plugin)
    ),
    ev.CombatEnded: lambda s, e: "== " + s.say("The combat is over") + " ==",
    ev.CommandUndone: lambda s, e: "  " + s.say("(the narrator undoes {undone})", undone=e.command),
}


def narrate(
    event: ev.Event, state: State, locale: str = i18n.DEFAULT, *, rules: RuleBook
) -> str | None:
    """One line for ``event`` in ``locale``, or None for events a reader does not need
    (bookkeeping). ``state`` is the state after the event, for names; ``rules`` has its
    ruleset, for the ruleset's own words."""
    tell = _TELL.get(type(event))
    return tell(_Teller(state, locale, rules), event) if tell else None
