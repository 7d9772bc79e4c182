"""``decide(state, command, now) -> events | RuleError``: every rule of R1–R16 that is not I/O.

A command is checked against the state; if it is legal its events are produced. While deciding,
each event is folded into a working copy of the state at once (``Ctx.emit``), so later steps of
the same command see its earlier effects, and the events returned always fold to the state the
engine reasoned about.

The package is laid out by rule family, each module named like the tests of its rulings. The
handlers (one per command, named after it) sit in ``lifecycle``, ``initiative``, ``turns``,
``holds``, ``reservations``, ``reactions``, ``conditions``, ``timers`` and ``bookkeeping``;
they call the turn machine (``flow``: what starts next between turns, reaction windows), which
calls ``placing`` (checks and places in the order); every module may use ``checks`` (input
validators and lookups that refuse), ``authorize`` (R16) and ``context`` (the working state,
refusals, limits). Imports only go down that list: no module imports one above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import commands as cmd
from .. import events as ev
from ..dice import DiceSource
from ..errors import Rejected, RuleError
from ..evolve import evolve
from ..model import NARRATOR, Actor, State, maker
from ..rulebook import RuleBook
from .authorize import authorize
from .bookkeeping import disable_plugin, enable_plugin, record_outcome
from .checks import check_size
from .conditions import apply_condition, remove_condition, surprise
from .context import (
    MAX_COMBATANTS,
    MAX_CONDITION_ROUNDS,
    MAX_DISABLED_PLUGINS,
    MAX_ITEMS,
    MAX_NAME,
    MAX_NUMBER,
    MAX_REROLLS,
    MAX_SECONDS,
    MAX_SECRETS,
    MAX_TEXT,
    MAX_VIEW_BYTES,
    MIN_TURN_SECONDS,
    PLAY_BYTES,
    PLAY_FIXED,
    PLAY_IDS,
    PLAY_PLUGINS,
    Ctx,
    reject,
)
from .holds import hold, take_held_turn
from .initiative import mark_surprised, order_ties, reorder_group, roll_initiative, start_combat
from .lifecycle import (
    add_combatant,
    create_combat,
    defeat_combatant,
    end_combat,
    remove_combatant,
    reveal_combatant,
    revive_combatant,
    undo,
)
from .reactions import (
    announce_trigger,
    claim_reaction,
    close_window,
    finish_reaction,
    pass_reaction,
)
from .reservations import reserve
from .timers import set_turn_timer, tick
from .turns import declare_action, end_turn, refocus

__all__ = [
    "MAX_COMBATANTS",
    "MAX_CONDITION_ROUNDS",
    "MAX_DISABLED_PLUGINS",
    "MAX_ITEMS",
    "MAX_NAME",
    "MAX_NUMBER",
    "MAX_REROLLS",
    "MAX_SECONDS",
    "MAX_SECRETS",
    "MAX_TEXT",
    "MAX_VIEW_BYTES",
    "MIN_TURN_SECONDS",
    "PLAY_BYTES",
    "PLAY_FIXED",
    "PLAY_IDS",
    "PLAY_PLUGINS",
    "Decided",
    "decide",
    "decide_folded",
]


def decide(
    state: State,
    command: cmd.Command,
    now: float,
    *,
    actor: Actor = NARRATOR,
    dice: DiceSource,
    rules: RuleBook,
) -> list[ev.Event] | RuleError:
    """Decide what ``command`` does to ``state`` at time ``now`` (seconds, from the caller's
    clock: the engine never reads one, R13), for ``actor``, rolling ``dice`` (the engine never
    rolls on its own) by the rulesets and condition types of ``rules``. Returns the events, or
    the rule error that refused the command, in which case nothing changes."""
    decided = decide_folded(state, command, now, actor=actor, dice=dice, rules=rules)
    return decided if isinstance(decided, RuleError) else decided.events


@dataclass(frozen=True, slots=True)
class Decided:
    """A command's events and the states they went through as it was decided:
    ``states[0]`` is the state it was decided on, ``states[i + 1]`` the state after
    ``events[i]``."""

    events: list[ev.Event]
    states: list[State]


def decide_folded(
    state: State,
    command: cmd.Command,
    now: float,
    *,
    actor: Actor = NARRATOR,
    dice: DiceSource,
    rules: RuleBook,
) -> Decided | RuleError:
    """``decide``, with the states its events fold to: deciding folds each event as it is
    made (``Ctx.emit``), and a host that applies the events keeps those states rather than
    fold the events again (the pipeline)."""
    try:
        return _decide(state, command, now, actor, dice, rules)
    except Rejected as refused:
        return refused.error


def _decide(
    state: State, command: cmd.Command, now: float, actor: Actor, dice: DiceSource, book: RuleBook
) -> Decided:
    # ``type(…) is``: a command's class is its kind (``_HANDLERS``), and a failed ``isinstance``
    # costs a lookup of ``__class__`` more, on every command.
    if type(command) is cmd.CreateCombat:
        events = create_combat(state, command, now, actor, book)
        states = [state]
        for event in events:
            states.append(evolve(states[-1], event))
        return Decided(events, states)
    if state.phase == "none":
        raise reject("no_combat", "there is no combat yet: create one first")
    if state.phase == "ended" and not isinstance(command, cmd.Undo):
        raise reject("combat_ended", "the combat has ended")
    rules = book.ruleset(state.ruleset)
    if rules is None:
        raise reject(
            "unknown_ruleset",
            "ruleset {ruleset!r} is not registered",
            "ruleset",
            ruleset=state.ruleset,
        )
    # Every field by position: no keyword to match, no ``events`` factory to call.
    ctx = Ctx(state, now, actor, dice, rules, book, [], [state])
    authorize(ctx, command)
    ctx.emit(_recorded(command.name, actor, now))
    _HANDLERS[type(command)](ctx, command)
    if type(command) is cmd.Tick and len(ctx.events) == 1:
        return Decided([], [state])  # nothing was due: a tick that changes nothing is not recorded
    if type(command) in _ADDS_CONTENT:
        check_size(ctx)
    return _decided(ctx.events, ctx.states)


# Made once per command: without ``__init__``'s call per field (``maker``).
_recorded = maker(ev.CommandRecorded)
_decided = maker(Decided)


_ADDS_CONTENT = frozenset(
    {
        cmd.AddCombatant,
        cmd.ApplyCondition,
        cmd.Surprise,
        cmd.Reserve,
        cmd.DeclareAction,
        cmd.AnnounceTrigger,
        cmd.ClaimReaction,
    }
)
"""Commands that put what a table chose (text, conditions, reservations) into the state: the
only ones held to ``MAX_VIEW_BYTES``. What every other command adds is bounded per combatant
(or, for disabled plugins, per combat) and kept room for."""


_HANDLERS: Mapping[type[cmd.Command], Callable[[Ctx, Any], None]] = {
    cmd.AddCombatant: add_combatant,
    cmd.RemoveCombatant: remove_combatant,
    cmd.DefeatCombatant: defeat_combatant,
    cmd.ReviveCombatant: revive_combatant,
    cmd.RevealCombatant: reveal_combatant,
    cmd.MarkSurprised: mark_surprised,
    cmd.RollInitiative: roll_initiative,
    cmd.OrderTies: order_ties,
    cmd.ReorderGroup: reorder_group,
    cmd.StartCombat: start_combat,
    cmd.EndTurn: end_turn,
    cmd.DeclareAction: declare_action,
    cmd.Hold: hold,
    cmd.TakeHeldTurn: take_held_turn,
    cmd.Reserve: reserve,
    cmd.Refocus: refocus,
    cmd.AnnounceTrigger: announce_trigger,
    cmd.ClaimReaction: claim_reaction,
    cmd.PassReaction: pass_reaction,
    cmd.CloseWindow: close_window,
    cmd.FinishReaction: finish_reaction,
    cmd.ApplyCondition: apply_condition,
    cmd.RemoveCondition: remove_condition,
    cmd.Surprise: surprise,
    cmd.RecordOutcome: record_outcome,
    cmd.DisablePlugin: disable_plugin,
    cmd.EnablePlugin: enable_plugin,
    cmd.SetTurnTimer: set_turn_timer,
    cmd.Tick: tick,
    cmd.Undo: undo,
    cmd.EndCombat: end_combat,
}
