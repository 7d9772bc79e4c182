"""The hooks a Turnkeeper plugin may implement, grouped by the phase of a combat they belong to.

A plugin is a module or object whose functions are marked with :data:`hookimpl` and named after
these specifications. It may accept fewer arguments than a hook declares (so adding an argument
to a hook later breaks nobody), and any hook but the registration ones may be ``async``.

Plugins never touch a combat's state. Whatever a plugin wants to happen is a command it returns
(one command, a list of them, or None); the daemon validates each like any client's command and
records it with the plugin's name (``plugin:<name>``, acting as narrator, R16). Every hook is
called after the command that caused it is durable, with ``combat`` showing the combat as that
command left it.

Each implementation is called on its own, with its own time budget and error handling: one
plugin's exception or timeout never reaches another plugin, the combat or the daemon.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pluggy

from turnkeeper_engine import ConditionType, Ruleset
from turnkeeper_engine import events as ev
from turnkeeper_engine.commands import ClaimReaction, Command
from turnkeeper_engine.model import (
    ActionSpec,
    Check,
    Combatant,
    Condition,
    Reservation,
    Turn,
    Window,
)

from .views import CombatView

PROJECT = "turnkeeper"
"""The pluggy project name: markers and the plugin manager must agree on it."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Mark a function as a hook implementation: ``@hookimpl def on_turn_start(combat, turn): ...``."""

DELEGATED_TAG = "auto"
"""A combatant or a reserved action with this tag has handed its reactions to plugins."""

Proposal = Command | Iterable[Command] | None
"""What an observing hook returns: nothing, a command, or several, submitted in order."""


@dataclass(frozen=True, slots=True)
class CheckAdjustment:
    """Edges and troubles a plugin adds to an initiative check (R3), with why."""

    edges: int = 0
    troubles: int = 0
    reason: str = ""


# ------------------------------------------------------------------------------- registration


@hookspec
def turnkeeper_rulesets() -> Iterable[Ruleset]:
    """Return the rulesets (game systems) this plugin adds.

    Called once, when the plugin is loaded. Each ruleset is registered under its ``name``; a
    name already taken by another plugin is reported and skipped, never replaced.

    :return: Rulesets to register. All results are collected. Must not be ``async``.

    .. versionadded:: 0.1
    """


@hookspec
def turnkeeper_condition_types() -> Iterable[ConditionType]:
    """Return the condition types this plugin adds (e.g. ``grappled`` for a 5e ruleset).

    Called once, when the plugin is loaded; a taken name is reported and skipped.

    :return: Condition types to register. All results are collected. Must not be ``async``.

    .. versionadded:: 0.1
    """


# ------------------------------------------------------------------------ combat start and end


@hookspec
def before_combat_start(combat: CombatView) -> Proposal:
    """Propose commands to apply just before ``start_combat`` rolls initiative.

    This is where surprise is decided (R8): a ``mark_surprised`` returned here gives the
    combatant its trouble and keeps it out of the bonus round.

    :param combat: The combat in its ``setup`` or ``initiative`` phase.
    :return: Commands applied, in order, before the start. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_combat_start(combat: CombatView, event: ev.CombatStarted) -> Proposal:
    """The initiative order is fixed and the first round (or bonus round) is about to run.

    :param combat: The combat after ``start_combat``.
    :param event: The ``combat_started`` event, with the order and the bonus round.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_combat_end(combat: CombatView, event: ev.CombatEnded) -> Proposal:
    """The combat has ended; only ``undo`` is accepted from now on.

    :param combat: The ended combat.
    :param event: The ``combat_ended`` event.
    :return: Commands to submit (only ``undo`` can succeed). All results are collected.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------- initiative


@hookspec
def before_initiative_check(combat: CombatView, combatant: Combatant) -> CheckAdjustment | None:
    """Add edges or troubles to a combatant's initiative check before it is rolled (R3).

    Called for an explicit ``roll_initiative`` and, at ``start_combat``, for every combatant
    (every group, through its first member) still without a check.

    :param combat: The combat before the check.
    :param combatant: Whose check is about to be rolled.
    :return: An adjustment or None. All results are collected and added up.

    .. versionadded:: 0.1
    """


@hookspec
def on_initiative_check(
    combat: CombatView, combatant: Combatant, check: Check, event: ev.InitiativeRolled
) -> Proposal:
    """An initiative check was rolled or supplied, every die recorded.

    :param combat: The combat after the check.
    :param combatant: Whose check it is (a group's check is reported once per group).
    :param check: The dice, rerolls, total and Fantastic flags.
    :param event: The ``initiative_rolled`` event, with every member of the group.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------- rounds


@hookspec
def on_round_start(combat: CombatView, round: int, event: ev.RoundStarted) -> Proposal:
    """A round starts; round 0 is the marvel bonus round (R7).

    :param combat: The combat as the round starts.
    :param round: The round's number.
    :param event: The ``round_started`` event.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_round_end(combat: CombatView, round: int, event: ev.RoundEnded) -> Proposal:
    """A round ended: every active combatant has had its turn (R5).

    :param combat: The combat after the round.
    :param round: The round's number.
    :param event: The ``round_ended`` event.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


# ------------------------------------------------------------------------------------- turns


@hookspec
def on_turn_start(
    combat: CombatView, turn: Turn, combatant: Combatant, event: ev.TurnStarted
) -> Proposal:
    """A combatant's turn started (normal, held or at the dnd3e floor). Fired once per turn.

    :param combat: The combat after the command that started the turn.
    :param turn: The turn as it started (round, kind, timer).
    :param combatant: Whose turn it is.
    :param event: The ``turn_started`` event.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_turn_end(combat: CombatView, combatant: Combatant, event: ev.TurnEnded) -> Proposal:
    """A combatant's turn ended (by end turn, timer, defeat, removal or the combat's end).

    :param combat: The combat after the command that ended the turn.
    :param combatant: Whose turn ended.
    :param event: The ``turn_ended`` event, with the reason.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


# ------------------------------------------------------------------------------------ actions


@hookspec
def before_action_declared(
    combat: CombatView, combatant: Combatant, action: ActionSpec
) -> Proposal:
    """Propose commands to apply just before a declared action takes effect.

    This is where an unseen attacker is detected or not (R8): a ``surprise`` returned here
    puts the surpriser's edge on this very attack (``action_declared.edges``).

    :param combat: The combat before the declaration, in the acting combatant's turn.
    :param combatant: Who acts.
    :param action: What it declares: kind, type, targets, tags, zone.
    :return: Commands applied, in order, before the declaration. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_action_declared(
    combat: CombatView, combatant: Combatant, action: ActionSpec, event: ev.ActionDeclared
) -> Proposal:
    """A combatant declared an action in its turn (R6); a reaction window may be open for it.

    :param combat: The combat after the declaration.
    :param combatant: Who acts.
    :param action: What it does: kind, type, targets, tags, zone.
    :param event: The ``action_declared`` event, with any surprise edges.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


# -------------------------------------------------------------------- triggers and reactions


@hookspec
def on_trigger(
    combat: CombatView, window: Window, offered: Sequence[Reservation]
) -> Iterable[ClaimReaction] | ClaimReaction | None:
    """A trigger-eligible moment opened a reaction window (R12): claim reactions for it.

    A plugin may claim only for a combatant it may act for: one tagged ``auto`` (a bot, or a
    player who handed its reactions to plugins) or a reservation whose action is tagged
    ``auto``. Other claims are refused and counted against the plugin.

    :param combat: The combat with the window open.
    :param window: The window: the moment's facts and who was offered it.
    :param offered: The reservations the window was offered for, in the window's order:
        those whose trigger matched, or, for a combatant the narrator offered by hand, all
        of its reservations (``CombatView.offered``).
    :return: ``claim_reaction`` commands. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_window_open(combat: CombatView, window: Window, event: ev.WindowOpened) -> Proposal:
    """A reaction window opened (R12). ``on_trigger`` is called for it too.

    :param combat: The combat with the window open.
    :param window: The window.
    :param event: The ``window_opened`` event.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_window_close(combat: CombatView, window: Window, event: ev.WindowClosed) -> Proposal:
    """A reaction window closed: its claims now resolve in order, or the turn resumes.

    :param combat: The combat after the window closed.
    :param window: The window as it was when it closed, with its claims and passes.
    :param event: The ``window_closed`` event, with the reason.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------- conditions


@hookspec
def on_condition_applied(
    combat: CombatView, condition: Condition, event: ev.ConditionApplied
) -> Proposal:
    """A condition was applied to a combatant (R8, R13).

    :param combat: The combat after the condition was applied.
    :param condition: The condition with its clocks.
    :param event: The ``condition_applied`` event.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


@hookspec
def on_condition_expired(
    combat: CombatView, condition: Condition, event: ev.ConditionExpired
) -> Proposal:
    """A condition ran out (its clocks reached zero at a turn boundary, R13).

    :param combat: The combat after it expired.
    :param condition: The condition as it was before expiring.
    :param event: The ``condition_expired`` event.
    :return: Commands to submit. All results are collected.

    .. versionadded:: 0.1
    """


HOOKS: tuple[str, ...] = (
    "turnkeeper_rulesets",
    "turnkeeper_condition_types",
    "before_combat_start",
    "on_combat_start",
    "on_combat_end",
    "before_initiative_check",
    "on_initiative_check",
    "on_round_start",
    "on_round_end",
    "on_turn_start",
    "on_turn_end",
    "before_action_declared",
    "on_action_declared",
    "on_trigger",
    "on_window_open",
    "on_window_close",
    "on_condition_applied",
    "on_condition_expired",
)
"""Every hook, in the order of a combat's phases (the documentation follows it)."""

REGISTRATION_HOOKS = frozenset({"turnkeeper_rulesets", "turnkeeper_condition_types"})
"""Hooks called once, when a plugin loads; every other hook is called per command."""
