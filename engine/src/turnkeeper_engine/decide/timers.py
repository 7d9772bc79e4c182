"""Time passing (R13): turn timers' warnings and expiry, reaction windows' deadlines, and the
turn timer's length changed mid-combat."""

from __future__ import annotations

from .. import commands as cmd
from .. import events as ev
from .context import MAX_SECONDS, MIN_TURN_SECONDS, Ctx, reject
from .flow import close_now, end_turn_now
from .holds import hold_now


def tick(ctx: Ctx, c: cmd.Tick) -> None:
    """``tick``: time passed; what came due (a window's deadline, a turn timer) happens."""
    w = ctx.state.window
    if w is not None and w.has_deadline and w.status == "open" and ctx.now >= w.deadline:
        close_now(ctx, "deadline")
    turn = ctx.state.turn
    if turn is None or ctx.state.window is not None:
        return
    if turn.warn_at is not None and not turn.warned and ctx.now >= turn.warn_at:
        assert turn.deadline is not None
        ctx.emit(ev.TurnTimerWarning(turn.combatant, turn.round, turn.deadline))
    if turn.deadline is not None and ctx.now >= turn.deadline:
        expiry = str(ctx.opts.get("turn_expiry"))
        can_hold = not turn.acted and turn.kind != "floor"
        action = "hold" if expiry == "hold" and can_hold else "end_turn"
        ctx.emit(ev.TurnTimerExpired(turn.combatant, turn.round, action))
        if action == "hold":
            hold_now(ctx, None)
        else:
            end_turn_now(ctx, "timer")


def set_turn_timer(ctx: Ctx, c: cmd.SetTurnTimer) -> None:
    """``set_turn_timer``: the length of the turns that start from now on, or no timer.

    A project decision where the rulings are silent (docs/rules.md, R13): a running turn keeps
    the deadline it started with, so a narrator who shortens the timer never ends a player's
    turn by surprise; turning the timer off stops the running turn's timer too, since the
    narrator no longer wants turns timed."""
    seconds = c.seconds
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not MIN_TURN_SECONDS <= seconds <= MAX_SECONDS
    ):
        raise reject(
            "invalid_value",
            "a whole number of seconds from {low} to {high}, or nil for no timer",
            "seconds",
            low=int(MIN_TURN_SECONDS),
            high=int(MAX_SECONDS),
        )
    ctx.emit(ev.TurnTimerSet(seconds))
