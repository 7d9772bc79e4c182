"""Reaction windows answered (R11, R12): triggers announced, reactions claimed and passed,
windows closed by the narrator, and reactions finished, with what the ruleset makes of a
reserved action taken or a trigger let pass (``readied_reaction``, ``readied_pass``)."""

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
        if not ctx.rules.claim_faces:
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
    for event in ctx.rules.readied_pass(ctx.state, c.combatant, w):
        ctx.emit(event)
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
    if claim.reserved_round is not None:
        for event in ctx.rules.readied_reaction(ctx.state, c.combatant, w, claim.reserved_round):
            ctx.emit(event)
    next_reaction(ctx)
