"""Before the order is fixed (R2–R4, R7, R8): surprise at the start, initiative checks, ties the
table orders, a group's own order, and the start of the combat with its order and bonus round."""

from __future__ import annotations

from .. import commands as cmd
from .. import events as ev
from ..order import Unit, sort_units
from .checks import find_active, find_combatant
from .context import Ctx, reject
from .flow import advance
from .placing import group_of, order_key, roll


def _require_before_order(ctx: Ctx) -> None:
    if ctx.state.phase not in ("setup", "initiative"):
        raise reject("wrong_phase", "the initiative order is already fixed")


def mark_surprised(ctx: Ctx, c: cmd.MarkSurprised) -> None:
    """``mark_surprised``: surprised at the start of combat, before its check (R8)."""
    if not ctx.rules.surprise:
        raise reject(
            "not_in_ruleset", "{ruleset} has no surprise at combat start", ruleset=ctx.rules.name
        )
    _require_before_order(ctx)
    combatant = find_active(ctx, c.combatant)
    if combatant.check is not None:
        raise reject("already_rolled", "surprise must come before the initiative check")
    if combatant.surprised:
        raise reject(
            "invalid_value", "{name} is already surprised", "combatant", name=combatant.name
        )
    ctx.emit(ev.SurpriseMarked(c.combatant))


def roll_initiative(ctx: Ctx, c: cmd.RollInitiative) -> None:
    """``roll_initiative``: one check for a combatant, or for its whole group (R2–R4)."""
    _require_before_order(ctx)
    combatant = find_combatant(ctx, c.combatant)
    group = group_of(ctx, combatant)
    if any(m.check is not None for m in group):
        raise reject(
            "already_rolled", "{name} has rolled already", "combatant", name=combatant.name
        )
    roll(ctx, combatant, c.faces, c.edges, c.troubles, tuple(m.id for m in group))


def order_ties(ctx: Ctx, c: cmd.OrderTies) -> None:
    """``order_ties``: the table's own order for exact ties, before a roll-off (R4)."""
    if not ctx.rules.supplied_tie_order:
        raise reject(
            "not_in_ruleset", "{ruleset} breaks ties by roll-off only", ruleset=ctx.rules.name
        )
    _require_before_order(ctx)
    if len(c.combatants) < 2 or len(set(c.combatants)) != len(c.combatants):
        raise reject("invalid_value", "name two or more distinct combatants", "combatants")
    for i in c.combatants:
        find_combatant(ctx, i, "combatants")
    ctx.emit(ev.TiesOrdered(c.combatants))


def reorder_group(ctx: Ctx, c: cmd.ReorderGroup) -> None:
    """``reorder_group``: the order of a group's members within its place (R4)."""
    members = {m.id for m in ctx.state.combatants if m.group == c.group and m.status != "removed"}
    if not members:
        raise reject("unknown_group", "no group {group!r}", "group", group=c.group)
    if set(c.combatants) != members or len(c.combatants) != len(members):
        raise reject("invalid_value", "name every member of the group once", "combatants")
    ctx.emit(ev.GroupReordered(c.group, c.combatants))


def start_combat(ctx: Ctx, c: cmd.StartCombat) -> None:
    """``start_combat``: the unrolled roll, the order is fixed (R4) with its bonus round
    (R7), and the first turn starts."""
    _require_before_order(ctx)
    present = [m for m in ctx.state.combatants if m.status != "removed"]
    if not any(m.status == "active" for m in present):
        raise reject("no_combatants", "add at least one active combatant first")
    for m in present:
        current = ctx.state.get(m.id)
        if current is not None and current.check is None:
            roll(ctx, current, None, 0, 0, tuple(g.id for g in group_of(ctx, current)))
    units: list[Unit] = []
    seen: set[str] = set()
    for m in ctx.state.combatants:
        if m.status == "removed" or m.id in seen:
            continue
        members = tuple(g.id for g in group_of(ctx, m))
        seen.update(members)
        units.append(Unit(members, order_key(ctx, m.id)))
    ordered, rolloffs = sort_units(
        units,
        ctx.dice,
        ctx.rules.rolloff_sides,
        ctx.state.tie_order if ctx.rules.supplied_tie_order else (),
    )
    order = tuple(i for u in ordered for i in u.members)
    bonus = ctx.rules.bonus_round(tuple(b for i in order if (b := ctx.state.get(i)) is not None))
    ctx.emit(ev.CombatStarted(order, tuple(rolloffs), bonus))
    ctx.emit(ev.RoundStarted(0 if bonus else 1))
    advance(ctx, None)
