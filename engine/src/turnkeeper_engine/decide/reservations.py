"""Reserving (marvel) or readying (dnd3e) an action with its trigger (R10, R11)."""

from __future__ import annotations

from .. import commands as cmd
from .. import events as ev
from ..model import Reservation
from .checks import (
    check_action,
    check_predicate,
    check_text,
    require_current_turn,
    require_no_window,
)
from .context import Ctx, reject


def reserve(ctx: Ctx, c: cmd.Reserve) -> None:
    """``reserve``: reserve (marvel) or ready (dnd3e) an action with its trigger (R10, R11)."""
    turn = require_current_turn(ctx, c.turn)
    require_no_window(ctx)
    if c.reserved_type not in ctx.rules.reservable_types(ctx.opts):
        raise reject(
            "invalid_action_type",
            "{ruleset} reserves only {action_types}",
            "reserved_type",
            ruleset=ctx.rules.name,
            action_types=", ".join(ctx.rules.reservable_types(ctx.opts)),
        )
    if turn.refocus or not ctx.rules.can_spend(turn.used, c.reserved_type):
        raise reject(
            "action_unavailable",
            "no {action_type} action left",
            "reserved_type",
            action_type=c.reserved_type,
        )
    action = check_action(ctx, c.action)
    assert action.type is not None
    if not ctx.rules.carries(c.reserved_type, action.type, ctx.opts):
        raise reject(
            "action_type_mismatch",
            "a {action_type} action cannot carry out {kind!r} ({needed_action_type})",
            "action.kind",
            action_type=c.reserved_type,
            kind=action.kind,
            needed_action_type=action.type,
        )
    check_text(c.trigger.text, "trigger.text")
    check_predicate(c.trigger.predicate, "trigger.predicate")
    reservation = Reservation(
        id=f"r{ctx.state.serial + 1}",
        combatant=turn.combatant,
        round=turn.round,
        mode=ctx.rules.reserve_mode,
        reserved_type=c.reserved_type,
        action=action,
        trigger=c.trigger,
    )
    ctx.emit(ev.ActionReserved(reservation))
