"""Events: the facts the engine records. Immutable values; state is folded from them.

Each event's ``name`` is its stable wire name. Every command that is accepted yields a
``CommandRecorded`` first (who, what, when), then the events of its effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from .model import (
    ActionSpec,
    Actor,
    Check,
    Claim,
    Combatant,
    Condition,
    OptionValue,
    Reservation,
    RollOff,
    TurnKind,
    Window,
)
from .model import Event as Event  # defined with the state, which keeps events for undo


@dataclass(frozen=True, slots=True)
class _About(Event):
    combatant: str

    def subjects(self) -> tuple[str, ...]:
        return (self.combatant,)


@dataclass(frozen=True, slots=True)
class CommandRecorded(Event):
    name: ClassVar[str] = "command_recorded"
    command: str
    actor: Actor
    at: float


@dataclass(frozen=True, slots=True)
class CommandUndone(Event):
    """The last recorded command is undone; the state before it returns (R15)."""

    name: ClassVar[str] = "command_undone"
    command: str


@dataclass(frozen=True, slots=True)
class CombatCreated(Event):
    name: ClassVar[str] = "combat_created"
    combat_id: str
    ruleset: str
    options: tuple[tuple[str, OptionValue], ...]


@dataclass(frozen=True, slots=True)
class CombatantAdded(Event):
    name: ClassVar[str] = "combatant_added"
    combatant: Combatant

    def subjects(self) -> tuple[str, ...]:
        return (self.combatant.id,)


@dataclass(frozen=True, slots=True)
class CombatantRevealed(CombatantAdded):
    name: ClassVar[str] = "combatant_revealed"


@dataclass(frozen=True, slots=True)
class CombatantRemoved(_About):
    name: ClassVar[str] = "combatant_removed"


@dataclass(frozen=True, slots=True)
class CombatantDefeated(_About):
    name: ClassVar[str] = "combatant_defeated"


@dataclass(frozen=True, slots=True)
class CombatantRevived(_About):
    name: ClassVar[str] = "combatant_revived"


@dataclass(frozen=True, slots=True)
class SurpriseMarked(_About):
    name: ClassVar[str] = "surprise_marked"


@dataclass(frozen=True, slots=True)
class InitiativeRolled(_About):
    """A check; ``members`` are everyone it applies to (the whole group for a group check)."""

    name: ClassVar[str] = "initiative_rolled"
    members: tuple[str, ...]
    check: Check

    def subjects(self) -> tuple[str, ...]:
        return self.members


@dataclass(frozen=True, slots=True)
class TiesOrdered(Event):
    name: ClassVar[str] = "ties_ordered"
    combatants: tuple[str, ...]

    def subjects(self) -> tuple[str, ...]:
        return self.combatants


@dataclass(frozen=True, slots=True)
class GroupReordered(Event):
    name: ClassVar[str] = "group_reordered"
    group: str
    combatants: tuple[str, ...]

    def subjects(self) -> tuple[str, ...]:
        return self.combatants


@dataclass(frozen=True, slots=True)
class CombatStarted(Event):
    """The initiative order is fixed; ``bonus`` lists who acts in the bonus round (R7)."""

    name: ClassVar[str] = "combat_started"
    order: tuple[str, ...]
    rolloffs: tuple[RollOff, ...]
    bonus: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CombatantSlotted(_About):
    """A late arrival placed in the order (R1); ``passed``: its slot has gone this round."""

    name: ClassVar[str] = "combatant_slotted"
    order: tuple[str, ...]
    passed: bool
    rolloff: RollOff | None


@dataclass(frozen=True, slots=True)
class RoundStarted(Event):
    name: ClassVar[str] = "round_started"
    round: int


@dataclass(frozen=True, slots=True)
class RoundEnded(Event):
    name: ClassVar[str] = "round_ended"
    round: int


@dataclass(frozen=True, slots=True)
class TurnStarted(_About):
    name: ClassVar[str] = "turn_started"
    round: int
    kind: TurnKind
    at: float
    deadline: float | None = None
    warn_at: float | None = None
    number: int | None = None
    """The turn's ``Turn.number``, so a client following events can name it in a ``TurnRef``;
    None in events recorded before it was added (the fold then counts, as it always did)."""


@dataclass(frozen=True, slots=True)
class TurnEnded(_About):
    name: ClassVar[str] = "turn_ended"
    round: int
    reason: str


@dataclass(frozen=True, slots=True)
class TurnHeld(_About):
    """The turn is held (delayed) rather than ended: the combatant's round is not spent yet.
    ``ordinal`` orders holders by when they began holding (R9)."""

    name: ClassVar[str] = "turn_held"
    round: int
    number: int | None
    ordinal: int


@dataclass(frozen=True, slots=True)
class HoldPlanned(_About):
    """A holder's plan is now ``plan`` (with ``target``), in the words of ``Hold``: just
    ``before``/``after`` ``target``, ``at`` its named number, or None: not yet said (R9)."""

    name: ClassVar[str] = "hold_planned"
    plan: Literal["before", "after", "at"] | None
    target: str | None = None


@dataclass(frozen=True, slots=True)
class HoldLapsed(_About):
    """Its normal place came up while it still held: the held time is lost (R9)."""

    name: ClassVar[str] = "hold_lapsed"
    round: int


@dataclass(frozen=True, slots=True)
class HoldCancelled(_About):
    name: ClassVar[str] = "hold_cancelled"
    reason: str


@dataclass(frozen=True, slots=True)
class DelayForfeited(_About):
    """dnd3e: a turn at the delay floor ended without acting (R9)."""

    name: ClassVar[str] = "delay_forfeited"
    round: int


@dataclass(frozen=True, slots=True)
class PlaceChanged(_About):
    """A combatant's initiative number and place changed for the rest of the combat."""

    name: ClassVar[str] = "place_changed"
    place: int
    order: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class TurnForgone(_About):
    """dnd3e: a readied action taken before its normal place costs the regular turn (R11)."""

    name: ClassVar[str] = "turn_forgone"
    round: int


@dataclass(frozen=True, slots=True)
class ReactionRefreshed(_About):
    name: ClassVar[str] = "reaction_refreshed"


@dataclass(frozen=True, slots=True)
class ReactionSpent(_About):
    name: ClassVar[str] = "reaction_spent"


@dataclass(frozen=True, slots=True)
class ActionDeclared(_About):
    """An action taken; ``edges`` names where edges on it come from (e.g. ``surprised``)."""

    name: ClassVar[str] = "action_declared"
    round: int
    action: ActionSpec
    edges: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ActionResolved(_About):
    """The declared action goes ahead now that its reaction window is done."""

    name: ClassVar[str] = "action_resolved"
    action: ActionSpec


@dataclass(frozen=True, slots=True)
class ActionCancelled(_About):
    name: ClassVar[str] = "action_cancelled"
    action: ActionSpec
    reason: str


@dataclass(frozen=True, slots=True)
class ActionReserved(Event):
    name: ClassVar[str] = "action_reserved"
    reservation: Reservation

    def subjects(self) -> tuple[str, ...]:
        return (self.reservation.combatant,)


@dataclass(frozen=True, slots=True)
class _ReservationGone(_About):
    reservation: str


@dataclass(frozen=True, slots=True)
class ReservationExpired(_ReservationGone):
    name: ClassVar[str] = "reservation_expired"


@dataclass(frozen=True, slots=True)
class ReservationUsed(_ReservationGone):
    name: ClassVar[str] = "reservation_used"


@dataclass(frozen=True, slots=True)
class ReservationCancelled(_ReservationGone):
    name: ClassVar[str] = "reservation_cancelled"
    reason: str


@dataclass(frozen=True, slots=True)
class WindowOpened(Event):
    name: ClassVar[str] = "window_opened"
    window: Window

    def subjects(self) -> tuple[str, ...]:
        actor = self.window.facts.actor
        return (actor,) if actor else ()


@dataclass(frozen=True, slots=True)
class ReactionClaimed(Event):
    name: ClassVar[str] = "reaction_claimed"
    window: str
    claim: Claim

    def subjects(self) -> tuple[str, ...]:
        return (self.claim.combatant,)


@dataclass(frozen=True, slots=True)
class ReactionPassed(_About):
    name: ClassVar[str] = "reaction_passed"
    window: str


@dataclass(frozen=True, slots=True)
class WindowClosed(Event):
    name: ClassVar[str] = "window_closed"
    window: str
    reason: str


@dataclass(frozen=True, slots=True)
class SequenceOrdered(Event):
    """The order claims resolve in; marvel records each claimant's fresh check (R12)."""

    name: ClassVar[str] = "sequence_ordered"
    window: str
    sequence: tuple[str, ...]
    checks: tuple[tuple[str, Check], ...]
    rolloffs: tuple[RollOff, ...]


@dataclass(frozen=True, slots=True)
class ReactionStarted(_About):
    name: ClassVar[str] = "reaction_started"
    window: str
    action: ActionSpec
    edges: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReactionFinished(_About):
    name: ClassVar[str] = "reaction_finished"
    window: str


@dataclass(frozen=True, slots=True)
class ReactionCancelled(_About):
    name: ClassVar[str] = "reaction_cancelled"
    window: str
    reason: str


@dataclass(frozen=True, slots=True)
class SequenceEnded(Event):
    name: ClassVar[str] = "sequence_ended"
    window: str


@dataclass(frozen=True, slots=True)
class ConditionApplied(Event):
    name: ClassVar[str] = "condition_applied"
    condition: Condition

    def subjects(self) -> tuple[str, ...]:
        return (self.condition.target,)


@dataclass(frozen=True, slots=True)
class _ConditionGone(_About):
    condition: str
    type: str


@dataclass(frozen=True, slots=True)
class ConditionExpired(_ConditionGone):
    name: ClassVar[str] = "condition_expired"


@dataclass(frozen=True, slots=True)
class ConditionRemoved(_ConditionGone):
    name: ClassVar[str] = "condition_removed"
    reason: str


@dataclass(frozen=True, slots=True)
class TurnTimerWarning(_About):
    name: ClassVar[str] = "turn_timer_warning"
    round: int
    deadline: float


@dataclass(frozen=True, slots=True)
class TurnTimerExpired(_About):
    name: ClassVar[str] = "turn_timer_expired"
    round: int
    action: str


@dataclass(frozen=True, slots=True)
class TurnTimerSet(Event):
    """The turn timer is ``seconds`` long (None: off) for the turns that start from now on.
    A running turn keeps its deadline, unless the timer is turned off: then it has none."""

    name: ClassVar[str] = "turn_timer_set"
    seconds: int | None


@dataclass(frozen=True, slots=True)
class OutcomeRecorded(Event):
    """An outcome computed outside the engine, e.g. by a plugin: a DC, a check, a result.
    ``template`` filled in with ``args`` is ``text``; both are empty for a text written out in
    full (and in events recorded before they existed)."""

    name: ClassVar[str] = "outcome_recorded"
    kind: str
    text: str
    combatant: str | None
    values: tuple[tuple[str, OptionValue], ...]
    template: str = ""
    args: tuple[tuple[str, OptionValue], ...] = ()

    def subjects(self) -> tuple[str, ...]:
        return () if self.combatant is None else (self.combatant,)


@dataclass(frozen=True, slots=True)
class PluginDisabled(Event):
    """The plugin's hooks are no longer called for this combat."""

    name: ClassVar[str] = "plugin_disabled"
    plugin: str
    reason: str


@dataclass(frozen=True, slots=True)
class PluginEnabled(Event):
    name: ClassVar[str] = "plugin_enabled"
    plugin: str


@dataclass(frozen=True, slots=True)
class CombatEnded(Event):
    name: ClassVar[str] = "combat_ended"


EVENTS: dict[str, type[Event]] = {
    cls.name: cls
    for cls in (
        CommandRecorded,
        CommandUndone,
        CombatCreated,
        CombatantAdded,
        CombatantRevealed,
        CombatantRemoved,
        CombatantDefeated,
        CombatantRevived,
        SurpriseMarked,
        InitiativeRolled,
        TiesOrdered,
        GroupReordered,
        CombatStarted,
        CombatantSlotted,
        RoundStarted,
        RoundEnded,
        TurnStarted,
        TurnEnded,
        TurnHeld,
        HoldPlanned,
        HoldLapsed,
        HoldCancelled,
        DelayForfeited,
        PlaceChanged,
        TurnForgone,
        ReactionRefreshed,
        ReactionSpent,
        ActionDeclared,
        ActionResolved,
        ActionCancelled,
        ActionReserved,
        ReservationExpired,
        ReservationUsed,
        ReservationCancelled,
        WindowOpened,
        ReactionClaimed,
        ReactionPassed,
        WindowClosed,
        SequenceOrdered,
        ReactionStarted,
        ReactionFinished,
        ReactionCancelled,
        SequenceEnded,
        ConditionApplied,
        ConditionExpired,
        ConditionRemoved,
        TurnTimerWarning,
        TurnTimerExpired,
        TurnTimerSet,
        OutcomeRecorded,
        PluginDisabled,
        PluginEnabled,
        CombatEnded,
    )
}
