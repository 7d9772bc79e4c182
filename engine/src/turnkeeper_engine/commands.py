"""Commands: what clients, bots and plugins ask the engine to do. Immutable values.

Each command's ``name`` is its stable wire name. Commands about the current turn carry a
``turn`` (R5) so that a command meant for a turn that has passed is refused as ``stale_turn``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from .model import ActionSpec, Boundary, OptionValue, Trigger, TriggerFacts, TurnRef

Who = Literal["narrator", "controller"]
"""Who may send a command (R16): ``narrator`` (the narrator role, a narrator bridge, the clock,
plugins) or ``controller`` (the narrator, or a player for a combatant it controls)."""


@dataclass(frozen=True, slots=True)
class Command:
    """What every command is: a wire ``name`` and who may send it."""

    name: ClassVar[str]
    who: ClassVar[Who] = "narrator"
    """Narrator-only unless a command says otherwise, so a new command gives players nothing
    until its author decides it should. The protocol's method table reads it; a test holds
    ``decide``'s permission check (R16) to it."""


@dataclass(frozen=True, slots=True)
class CreateCombat(Command):
    """Open a combat under a ruleset, with rule options (R1, R6)."""

    name: ClassVar[str] = "create_combat"
    combat_id: str
    ruleset: str
    options: tuple[tuple[str, OptionValue], ...] = ()


@dataclass(frozen=True, slots=True)
class AddCombatant(Command):
    """Add a combatant in any phase (R1). After initiative it rolls (or uses ``faces``) and is
    slotted by the tie chain."""

    name: ClassVar[str] = "add_combatant"
    id: str
    display_name: str
    controller: str | None = None
    player_character: bool = False
    init_mod: int = 0
    dexterity: int = 10
    group: str | None = None
    tags: tuple[str, ...] = ()
    hidden: bool = False
    faces: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveCombatant(Command):
    """Take a combatant out of the combat for good (R1); what it had pending is cancelled."""

    name: ClassVar[str] = "remove_combatant"
    combatant: str


@dataclass(frozen=True, slots=True)
class DefeatCombatant(Command):
    """Mark a combatant defeated (R1): it keeps its place, gets no turns, and what it had
    pending is cancelled."""

    name: ClassVar[str] = "defeat_combatant"
    combatant: str


@dataclass(frozen=True, slots=True)
class ReviveCombatant(Command):
    """Bring a defeated combatant back into the fight at its place (R1)."""

    name: ClassVar[str] = "revive_combatant"
    combatant: str


@dataclass(frozen=True, slots=True)
class RevealCombatant(Command):
    """Make a hidden combatant visible to players and observers (R16)."""

    name: ClassVar[str] = "reveal_combatant"
    combatant: str


@dataclass(frozen=True, slots=True)
class MarkSurprised(Command):
    """Before its initiative check, mark a combatant Surprised (marvel, R8)."""

    name: ClassVar[str] = "mark_surprised"
    combatant: str


@dataclass(frozen=True, slots=True)
class RollInitiative(Command):
    """Roll (or supply ``faces`` for) a combatant's check; a group member rolls for its group."""

    name: ClassVar[str] = "roll_initiative"
    who: ClassVar[Who] = "controller"
    combatant: str
    faces: tuple[int, ...] | None = None
    edges: int = 0
    troubles: int = 0


@dataclass(frozen=True, slots=True)
class OrderTies(Command):
    """Supply the order of tied combatants before any roll-off (R4, marvel)."""

    name: ClassVar[str] = "order_ties"
    who: ClassVar[Who] = "controller"
    combatants: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReorderGroup(Command):
    """Set the order members of a group act in (R4)."""

    name: ClassVar[str] = "reorder_group"
    group: str
    combatants: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StartCombat(Command):
    """Roll what is unrolled, fix the order, and begin the bonus round or round 1."""

    name: ClassVar[str] = "start_combat"


@dataclass(frozen=True, slots=True)
class EndTurn(Command):
    """End the current turn; the next in the order begins, or the next round (R5)."""

    name: ClassVar[str] = "end_turn"
    who: ClassVar[Who] = "controller"
    turn: TurnRef


@dataclass(frozen=True, slots=True)
class DeclareAction(Command):
    """Take an action in the current turn (R6). Opens a reaction window (R12)."""

    name: ClassVar[str] = "declare_action"
    who: ClassVar[Who] = "controller"
    turn: TurnRef
    action: ActionSpec


@dataclass(frozen=True, slots=True)
class Hold(Command):
    """Hold the turn (marvel) or delay (dnd3e) (R9), optionally with its plan.

    The plan is a lower ``number``, and/or just ``when`` (before or after) ``other``. Saying it
    with the hold is what lets the last combatant of a round take its held turn before the
    first of the next: holding ends that round in the same command (R9)."""

    name: ClassVar[str] = "hold"
    who: ClassVar[Who] = "controller"
    turn: TurnRef
    number: int | None = None
    when: Literal["before", "after"] | None = None
    other: str | None = None


@dataclass(frozen=True, slots=True)
class TakeHeldTurn(Command):
    """Say when a held turn is taken: just ``before`` or just ``after`` another combatant."""

    name: ClassVar[str] = "take_held_turn"
    who: ClassVar[Who] = "controller"
    combatant: str
    when: Literal["before", "after"]
    other: str


@dataclass(frozen=True, slots=True)
class Reserve(Command):
    """Reserve (marvel, R10) or ready (dnd3e, R11) an action with a trigger."""

    name: ClassVar[str] = "reserve"
    who: ClassVar[Who] = "controller"
    turn: TurnRef
    reserved_type: str
    action: ActionSpec
    trigger: Trigger


@dataclass(frozen=True, slots=True)
class Refocus(Command):
    """dnd3e: spend the full round to move up to 20 + initiative bonus (R14)."""

    name: ClassVar[str] = "refocus"
    who: ClassVar[Who] = "controller"
    turn: TurnRef


@dataclass(frozen=True, slots=True)
class AnnounceTrigger(Command):
    """A narrator or bridge names a trigger-eligible moment (R12); ``offer`` adds reservers."""

    name: ClassVar[str] = "announce_trigger"
    facts: TriggerFacts
    offer: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimReaction(Command):
    """Claim a reaction in an open window, with a reservation or a stated action."""

    name: ClassVar[str] = "claim_reaction"
    who: ClassVar[Who] = "controller"
    window: str
    combatant: str
    reservation: str | None = None
    action: ActionSpec | None = None
    faces: tuple[int, ...] | None = None
    """marvel: the claimant's own dice for the fresh check, used if the sequence needs one."""


@dataclass(frozen=True, slots=True)
class PassReaction(Command):
    """Answer an open reaction window without reacting: the combatant lets the moment pass
    (R12)."""

    name: ClassVar[str] = "pass_reaction"
    who: ClassVar[Who] = "controller"
    window: str
    combatant: str


@dataclass(frozen=True, slots=True)
class CloseWindow(Command):
    """Close an open reaction window now, without waiting for more answers; its claims resolve
    (R12)."""

    name: ClassVar[str] = "close_window"
    window: str


@dataclass(frozen=True, slots=True)
class FinishReaction(Command):
    """The reacting combatant is done; the next claim resolves or the turn resumes."""

    name: ClassVar[str] = "finish_reaction"
    who: ClassVar[Who] = "controller"
    window: str
    combatant: str


@dataclass(frozen=True, slots=True)
class ApplyCondition(Command):
    """Apply a condition lasting ``rounds`` boundaries of ``anchor``'s turns (R13)."""

    name: ClassVar[str] = "apply_condition"
    target: str
    type: str
    rounds: int = 1
    boundary: Boundary = "end"
    anchor: str | None = None
    source: str | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class RemoveCondition(Command):
    """Remove a condition before it expires (R13)."""

    name: ClassVar[str] = "remove_condition"
    condition: str


@dataclass(frozen=True, slots=True)
class Surprise(Command):
    """Mid-combat surprise (marvel, R8): ``target`` is surprised by ``by``."""

    name: ClassVar[str] = "surprise"
    target: str
    by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecordOutcome(Command):
    """Record an outcome computed outside the engine (a plugin's DC, check or result).

    ``template`` and ``args``, when given, are what ``text`` was made of
    (``template.format(**dict(args)) == text``), so a daemon can tell it in a table's language.
    """

    name: ClassVar[str] = "record_outcome"
    kind: str
    text: str
    combatant: str | None = None
    values: tuple[tuple[str, OptionValue], ...] = ()
    template: str = ""
    args: tuple[tuple[str, OptionValue], ...] = ()


@dataclass(frozen=True, slots=True)
class DisablePlugin(Command):
    """Stop calling a plugin's hooks for this combat (the daemon does so to a failing one)."""

    name: ClassVar[str] = "disable_plugin"
    plugin: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EnablePlugin(Command):
    """Call a disabled plugin's hooks for this combat again."""

    name: ClassVar[str] = "enable_plugin"
    plugin: str


@dataclass(frozen=True, slots=True)
class SetTurnTimer(Command):
    """Set the turn timer to ``seconds`` (nil: no timer) for the turns that start from now on;
    clearing it also stops the running turn's timer (R13)."""

    name: ClassVar[str] = "set_turn_timer"
    seconds: int | None


@dataclass(frozen=True, slots=True)
class Tick(Command):
    """Let time pass: turn timers and window deadlines fire (R13)."""

    name: ClassVar[str] = "tick"


@dataclass(frozen=True, slots=True)
class Undo(Command):
    """Undo the last recorded command: the combat returns to the state before it (R15)."""

    name: ClassVar[str] = "undo"


@dataclass(frozen=True, slots=True)
class EndCombat(Command):
    """End the combat; everything pending is cancelled and recorded as such (R1)."""

    name: ClassVar[str] = "end_combat"


COMMANDS: dict[str, type[Command]] = {
    cls.name: cls
    for cls in (
        CreateCombat,
        AddCombatant,
        RemoveCombatant,
        DefeatCombatant,
        ReviveCombatant,
        RevealCombatant,
        MarkSurprised,
        RollInitiative,
        OrderTies,
        ReorderGroup,
        StartCombat,
        EndTurn,
        DeclareAction,
        Hold,
        TakeHeldTurn,
        Reserve,
        Refocus,
        AnnounceTrigger,
        ClaimReaction,
        PassReaction,
        CloseWindow,
        FinishReaction,
        ApplyCondition,
        RemoveCondition,
        Surprise,
        RecordOutcome,
        DisablePlugin,
        EnablePlugin,
        SetTurnTimer,
        Tick,
        Undo,
        EndCombat,
    )
}
