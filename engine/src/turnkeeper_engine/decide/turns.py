"""A turn's own commands (R5, R6, R14): ending it, declaring an action, refocusing."""

from __future__ import annotations

from .. import commands as cmd
from .. import events as ev
from ..model import ActionSpec, TriggerFacts
from .checks import check_action, require_current_turn, require_no_window
from .context import Ctx, reject
from .flow import end_turn_now, open_window, surprise_edges


def end_turn(ctx: Ctx, c: cmd.EndTurn) -> None:
    """``end_turn``: the current turn ends (R5)."""
    require_current_turn(ctx, c.turn)
    require_no_window(ctx)
    end_turn_now(ctx, "ended")


def declare_action(ctx: Ctx, c: cmd.DeclareAction) -> None:
    """``declare_action``: an action on the current turn, which may open a window (R6, R12)."""
    turn = require_current_turn(ctx, c.turn)
    require_no_window(ctx)
    action = check_action(ctx, c.action)
    assert action.type is not None
    if turn.refocus or not ctx.rules.can_spend(turn.used, action.type):
        raise reject(
            "action_unavailable",
            "no {action_type} action left this turn",
            "action.type",
            action_type=action.type,
        )
    round_no = turn.round
    ctx.emit(
        ev.ActionDeclared(
            turn.combatant, round_no, action, surprise_edges(ctx, turn.combatant, action)
        )
    )
    event = "move" if action.type in ("movement", "move") else "action_declared"
    actor_tags = ctx.state.get(turn.combatant).tags  # type: ignore[union-attr]
    facts = TriggerFacts(
        event,
        turn.combatant,
        action.kind,
        action.targets,
        tuple(dict.fromkeys((*action.tags, *actor_tags))),
        action.zone,
        action.description,
    )
    if not open_window(ctx, facts, action, (), only_if_matched=False):
        ctx.emit(ev.ActionResolved(turn.combatant, action))


def refocus(ctx: Ctx, c: cmd.Refocus) -> None:
    """``refocus``: dnd3e's full-round refocus (R14)."""
    if not ctx.rules.refocus:
        raise reject("not_in_ruleset", "{ruleset} has no refocus", ruleset=ctx.rules.name)
    declare_action(ctx, cmd.DeclareAction(c.turn, ActionSpec("refocus", "full", "refocus")))
