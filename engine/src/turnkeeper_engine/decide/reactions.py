"""Reaction windows answered (R11, R12): triggers announced, reactions claimed and passed,
windows closed by the narrator, and reactions finished; a readied action moving its readier."""

from __future__ import annotations

from dataclasses import replace

from .. import commands as cmd
from .. import events as ev
from ..model import Claim, Reservation, Window
from .checks import (
    check_action,
    check_names,
    check_text,
    find_active,
    find_combatant,
    require_in_rounds,
    require_no_window,
)
from .context import MAX_NAME, Ctx, reject
from .flow import close_now, maybe_close, next_reaction, open_window


def _require_open_window(ctx: Ctx, window_id: str) -> Window:
    require_in_rounds(ctx)
    w = ctx.state.window
    if w is None or w.id != window_id:
        raise reject("unknown_window", "no open window {id!r}", "window", id=window_id)
    if w.status != "open":
        raise reject("window_closed", "that window is closed; its claims are resolving", "window")
    return w


def announce_trigger(ctx: Ctx, c: cmd.AnnounceTrigger) -> None:
    """``announce_trigger``: the narrator opens a window for a moment it names (R12)."""
    require_in_rounds(ctx)
    require_no_window(ctx)
    check_text(c.facts.event, "facts.event", limit=MAX_NAME)
    check_text(c.facts.text, "facts.text", required=False)
    check_names(c.facts.targets, "facts.targets")
    check_names(c.facts.tags, "facts.tags")
    check_names(c.offer, "offer")
    if c.facts.actor is not None:
        find_combatant(ctx, c.facts.actor, "facts.actor")
    for i in c.offer:
        find_active(ctx, i, "offer")
    open_window(ctx, c.facts, None, c.offer, only_if_matched=False, announced=True)


def claim_reaction(ctx: Ctx, c: cmd.ClaimReaction) -> None:
    """``claim_reaction``: a reaction claimed in an open window (R10–R12)."""
    w = _require_open_window(ctx, c.window)
    combatant = find_active(ctx, c.combatant)
    if c.combatant in {cl.combatant for cl in w.claims} | set(w.passes):
        raise reject(
            "already_answered", "{name} has answered already", "combatant", name=combatant.name
        )
    reservation: Reservation | None = None
    if c.reservation is not None:
        reservation = next((r for r in ctx.state.reservations if r.id == c.reservation), None)
        if reservation is None or reservation.combatant != c.combatant:
            raise reject(
                "unknown_reservation",
                "no reservation {id!r}",
                "reservation",
                id=str(c.reservation),
            )
    elif ctx.rules.reserve_mode == "ready":
        raise reject("no_reservation", "only a readied action can be taken here", "reservation")
    elif c.action is None:
        raise reject("invalid_value", "claim with a reservation or state the action", "action")
    if ctx.rules.claim_costs_reaction and not combatant.reaction:
        raise reject(
            "no_reaction", "{name} has no reaction available", "combatant", name=combatant.name
        )
    action = reservation.action if reservation is not None else c.action
    assert action is not None
    if reservation is None:
        action = replace(check_action(ctx, action), type=action.type or "reaction")
    supplied_by = None
    if c.faces is not None:
        if not ctx.rules.fresh_sequence_checks:
            raise reject(
                "not_in_ruleset", "{ruleset} rolls no fresh checks", "faces", ruleset=ctx.rules.name
            )
        ctx.rules.roll(combatant, ctx.dice, faces=c.faces)  # validates the faces (R2)
        supplied_by = ctx.actor.user or ctx.actor.role
    claim = Claim(
        c.combatant,
        c.reservation,
        action,
        reservation.round if reservation else None,
        c.faces,
        supplied_by,
    )
    ctx.emit(ev.ReactionClaimed(w.id, claim))
    if ctx.rules.claim_costs_reaction:
        ctx.emit(ev.ReactionSpent(c.combatant))
    if reservation is not None:
        ctx.emit(ev.ReservationUsed(c.combatant, reservation.id))
    maybe_close(ctx)


def pass_reaction(ctx: Ctx, c: cmd.PassReaction) -> None:
    """``pass_reaction``: an offered combatant lets the moment go (R11, R12)."""
    w = _require_open_window(ctx, c.window)
    combatant = find_active(ctx, c.combatant)
    if c.combatant in {cl.combatant for cl in w.claims} | set(w.passes):
        raise reject(
            "already_answered", "{name} has answered already", "combatant", name=combatant.name
        )
    ctx.emit(ev.ReactionPassed(c.combatant, w.id))
    if ctx.rules.readied_moves_initiative and c.combatant in w.offered:
        # R11: in a later round the trigger alone moves the readier up and costs its regular
        # turn, "whether that action is taken or not".
        for r in ctx.state.reservations:
            if r.combatant == c.combatant and r.round < (ctx.state.round or 0):
                ctx.emit(ev.ReservationUsed(c.combatant, r.id))
                _readier_moves(ctx, c.combatant, w, r.round)
                break
    maybe_close(ctx)


def close_window(ctx: Ctx, c: cmd.CloseWindow) -> None:
    """``close_window``: the narrator closes the window before every answer is in."""
    _require_open_window(ctx, c.window)
    close_now(ctx, "narrator")


def finish_reaction(ctx: Ctx, c: cmd.FinishReaction) -> None:
    """``finish_reaction``: the reacting combatant is done; the next reaction starts."""
    require_in_rounds(ctx)
    w = ctx.state.window
    if w is None or w.id != c.window:
        raise reject("unknown_window", "no window {id!r}", "window", id=c.window)
    if w.status != "resolving" or w.sequence[w.index] != c.combatant:
        raise reject("not_reacting", "that combatant is not the one reacting now", "combatant")
    ctx.emit(ev.ReactionFinished(c.combatant, w.id))
    claim = next(cl for cl in w.claims if cl.combatant == c.combatant)
    if ctx.rules.readied_moves_initiative and claim.reserved_round is not None:
        _readier_moves(ctx, c.combatant, w, claim.reserved_round)
    next_reaction(ctx)


def _readier_moves(ctx: Ctx, readier: str, w: Window, reserved_round: int) -> None:
    """R11: the readier's place becomes immediately ahead of the triggering combatant, at its
    count; in a later round, before its normal place, it also loses that round's regular turn."""
    trigger_actor = w.facts.actor
    if trigger_actor is None or trigger_actor == readier or trigger_actor not in ctx.state.order:
        return
    other = ctx.state.get(trigger_actor)
    assert other is not None
    assert other.place is not None
    rest = tuple(i for i in ctx.state.order if i != readier)
    index = rest.index(trigger_actor)
    order = (*rest[:index], readier, *rest[index:])
    ctx.emit(ev.PlaceChanged(readier, other.place, order, "readied_action"))
    round_no = ctx.state.round or 0
    if reserved_round < round_no and readier not in ctx.state.reached:
        ctx.emit(ev.TurnForgone(readier, round_no))
