"""Checks and places in the order (R1, R3, R4): a group's members, a check rolled, a late arrival
slotted by the tie chain."""

from __future__ import annotations

from typing import Any

from .. import events as ev
from ..model import Combatant, RollOff
from ..order import roll_off, slot_index
from .context import MAX_REROLLS, Ctx, reject


def order_key(ctx: Ctx, combatant_id: str) -> tuple[int, ...]:
    """A combatant's sort key at its place, higher first (R4)."""
    c = ctx.state.get(combatant_id)
    assert c is not None
    assert c.place is not None
    return ctx.rules.tie_key(c, c.place, c.check.fantastic if c.check else False)


def slot_by_chain(ctx: Ctx, combatant_id: str) -> None:
    """Place a late arrival by the tie chain, rolling off exact ties as they come (R1, R4)."""
    new_key = order_key(ctx, combatant_id)
    passes: list[tuple[tuple[str, int], ...]] = []

    def wins_tie(other: str) -> bool:
        order, rolloff = roll_off([combatant_id, other], ctx.dice, ctx.rules.rolloff_sides)
        passes.extend(rolloff.passes)
        return order[0] == combatant_id

    index = slot_index(ctx.state.order, lambda i: order_key(ctx, i), new_key, wins_tie)
    order = (*ctx.state.order[:index], combatant_id, *ctx.state.order[index:])
    rolloff = RollOff(ctx.rules.rolloff_sides, tuple(passes)) if passes else None
    slot(ctx, combatant_id, order, rolloff)


def slot(ctx: Ctx, combatant_id: str, order: tuple[str, ...], rolloff: Any) -> None:
    """Record ``combatant_id``'s place in ``order``, and whether its slot has passed this round."""
    index = order.index(combatant_id)
    passed = any(other in ctx.state.reached for other in order[index + 1 :])
    ctx.emit(ev.CombatantSlotted(combatant_id, order, passed, rolloff))


def group_of(ctx: Ctx, c: Combatant) -> list[Combatant]:
    """The combatants that share ``c``'s check: its group, or ``c`` alone."""
    if c.group is None:
        return [c]
    return [m for m in ctx.state.combatants if m.group == c.group and m.status != "removed"]


def roll(
    ctx: Ctx,
    combatant: Combatant,
    faces: tuple[int, ...] | None,
    edges: int,
    troubles: int,
    members: tuple[str, ...],
) -> None:
    """Roll (or take the supplied faces of) one check for ``members`` (R2, R3, R8)."""
    for name, count in (("edges", edges), ("troubles", troubles)):
        if not 0 <= count <= MAX_REROLLS:
            raise reject("invalid_value", "between 0 and {limit}", name, limit=MAX_REROLLS)
    if edges and not ctx.rules.surprise:
        raise reject(
            "not_in_ruleset", "{ruleset} checks have no edges", "edges", ruleset=ctx.rules.name
        )
    if troubles and not ctx.rules.surprise:
        raise reject(
            "not_in_ruleset",
            "{ruleset} checks have no troubles",
            "troubles",
            ruleset=ctx.rules.name,
        )
    surprised = any(
        m.surprised for m in ctx.state.combatants if m.id in members
    )  # R3/R8: a Surprised combatant (or group) has one trouble on the check
    supplier = ctx.actor.user or ctx.actor.role
    check = ctx.rules.roll(
        combatant,
        ctx.dice,
        edges=edges,
        troubles=troubles + int(surprised),
        faces=faces,
        supplied_by=supplier,
    )
    ctx.emit(ev.InitiativeRolled(combatant.id, members, check))
