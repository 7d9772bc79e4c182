"""Holding a turn (marvel) and delaying (dnd3e), R9: the held turn, the moment planned for it,
and two holders each waiting for the other."""

from __future__ import annotations

from typing import Literal

from .. import commands as cmd
from .. import events as ev
from ..model import Hold
from .checks import (
    check_number,
    find_active,
    require_current_turn,
    require_in_rounds,
    require_no_window,
)
from .context import Ctx, reject
from .flow import advance, expire_conditions, next_normal


def hold_now(
    ctx: Ctx,
    number: int | None,
    when: Literal["before", "after"] | None = None,
    other: str | None = None,
) -> None:
    """Hold the turn in progress (R9): at ``number``, or just ``when`` ``other``'s turn."""
    turn = ctx.state.turn
    assert turn is not None
    c = ctx.state.get(turn.combatant)
    assert c is not None
    assert c.place is not None
    if number is not None:
        check_number(number, "number")
        if number >= c.place:
            raise reject(
                "invalid_hold_number",
                "a held turn goes lower than {place}",
                "number",
                place=c.place,
            )
        floor = ctx.rules.delay_floor(c, ctx.opts)
        if floor is not None and number < floor:
            raise reject(
                "below_delay_floor",
                "{name} cannot delay below {floor}",
                "number",
                name=c.name,
                floor=floor,
            )
    if (when is None) != (other is None):
        raise reject(
            "invalid_value", "give both when and other, or neither", "other" if when else "when"
        )
    ctx.emit(ev.TurnHeld(turn.combatant, turn.round, number, ctx.state.serial + 1))
    if when is not None and other is not None:
        # Judged once the turn is held, as the moment will be; a refusal still changes
        # nothing, as the whole command is refused.
        _plan(ctx, turn.combatant, when, other)
    expire_conditions(ctx)
    advance(ctx, None)


def hold(ctx: Ctx, c: cmd.Hold) -> None:
    """``hold``: hold (marvel) or delay (dnd3e) the turn before acting in it (R9)."""
    turn = require_current_turn(ctx, c.turn)
    require_no_window(ctx)
    if turn.acted:
        raise reject("action_taken", "a turn can be held only before acting in it", "turn")
    if turn.kind == "floor":
        raise reject("must_act", "at the delay floor a delayer acts or forfeits (R9)", "turn")
    hold_now(ctx, c.number, c.when, c.other)


def take_held_turn(ctx: Ctx, c: cmd.TakeHeldTurn) -> None:
    """``take_held_turn``: say when a held turn is taken, before or after someone (R9)."""
    require_in_rounds(ctx)
    if ctx.state.hold_of(c.combatant) is None:
        raise reject("not_holding", "that combatant is not holding a turn", "combatant")
    _plan(ctx, c.combatant, c.when, c.other)


def _plan(ctx: Ctx, holder: str, when: str, other: str) -> None:
    """Record when ``holder``'s held turn is taken: just before or just after ``other`` (R9).
    A moment that will not come while the hold lasts is refused, never kept to lapse."""
    if when not in ("before", "after"):
        raise reject("invalid_value", "say 'before' or 'after'", "when")
    if other == holder:
        raise reject("invalid_target", "a held turn goes before or after someone else", "other")
    target = find_active(ctx, other, "other")
    if not _moment_comes(ctx, holder, when, other):
        if when == "before":
            raise reject(
                "moment_passed",
                "too late to act just before {name}: that moment will not come while the hold "
                "lasts",
                "other",
                name=target.name,
            )
        raise reject(
            "moment_passed",
            "too late to act just after {name}: that moment will not come while the hold lasts",
            "other",
            name=target.name,
        )
    ctx.emit(ev.HoldPlanned(holder, "before" if when == "before" else "after", other))
    other_hold = ctx.state.hold_of(other)
    if (
        when == "after"
        and other_hold is not None
        and (other_hold.plan, other_hold.target) == ("after", holder)
    ):
        _break_after_cycle(ctx, holder, other)


def _moment_comes(ctx: Ctx, holder: str, when: str, other: str) -> bool:
    """Whether the moment just ``when`` ``other``'s turn still comes while ``holder`` holds:
    later this round, or (marvel, where a hold lasts past the round) next round before the
    holder's own place, where the hold would lapse (R9)."""
    s = ctx.state
    waiting = s.hold_of(other) is not None  # its held turn, whenever it comes, is the moment
    acting = s.turn is not None and s.turn.combatant == other
    this_round = waiting or (when == "after" and acting) or other not in s.reached
    if s.phase == "bonus_round" and other not in s.bonus:
        this_round = waiting
    if other not in s.order or holder not in s.order:
        return this_round
    comes_first = s.order.index(other) < s.order.index(holder)
    if holder not in s.reached:
        # A hold from an earlier round: the holder's own place this round ends it.
        return this_round and (waiting or acting or comes_first)
    return this_round or (ctx.rules.holds_carry_over and comes_first)


def _break_after_cycle(ctx: Ctx, a: str, b: str) -> None:
    """Two holders each waiting to go after the other (R9): marvel lets the first holder go
    first; in dnd3e the higher initiative bonus goes last. The one going first takes the very
    next moment between turns; the other follows it."""
    ha, hb = ctx.state.hold_of(a), ctx.state.hold_of(b)
    assert ha is not None
    assert hb is not None
    first, second = sorted((ha, hb), key=lambda h: _mutual_priority(ctx, h))
    turn = ctx.state.turn
    nxt = next_normal(ctx)
    if turn is not None:
        ctx.emit(ev.HoldPlanned(first.combatant, "after", turn.combatant))
    elif nxt is not None and nxt != first.combatant:
        # Between turns (the plan came with a hold): the next moment is before the next turn.
        ctx.emit(ev.HoldPlanned(first.combatant, "before", nxt))
    else:
        # Nobody is left this round, or the next turn is the first holder's own (marvel, a
        # hold carried over, which lapses there): its own place is its very next moment.
        ctx.emit(ev.HoldPlanned(first.combatant, "at" if first.number is not None else None))
    ctx.emit(ev.HoldPlanned(second.combatant, "after", first.combatant))


def _mutual_priority(ctx: Ctx, h: Hold) -> tuple[int, ...]:
    c = ctx.state.get(h.combatant)
    assert c is not None
    return ctx.rules.mutual_wait_priority(c, h.seq)
