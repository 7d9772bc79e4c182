"""Conditions on combatants (R8, R13): applied, removed, and marvel's mid-combat surprise. Their
expiry at turn boundaries is the turn machine's (``flow.expire_conditions``)."""

from __future__ import annotations

from .. import commands as cmd
from .. import events as ev
from ..model import Clock, Condition, maker
from .checks import check_names, check_text, find_active, find_combatant, require_in_rounds
from .context import MAX_CONDITION_ROUNDS, Ctx, reject

# Made on every ``apply_condition`` and ``remove_condition``, every field given: by ``maker``,
# without a frozen ``__init__``'s call through ``object.__setattr__`` per field.
_condition = maker(Condition)
_clock = maker(Clock)
_applied = maker(ev.ConditionApplied)
_removed = maker(ev.ConditionRemoved)


def apply_condition(ctx: Ctx, c: cmd.ApplyCondition) -> None:
    """``apply_condition``: a condition of a known type, anchored to a combatant's turns."""
    kind = ctx.book.condition_type(c.type)
    if kind is None or (kind.rulesets and ctx.rules.name not in kind.rulesets):
        raise reject(
            "unknown_condition_type", "no condition type {type!r} here", "type", type=c.type
        )
    find_combatant(ctx, c.target, "target")
    if c.source is not None:
        find_combatant(ctx, c.source, "source")
    anchor = c.anchor or c.source or c.target
    if anchor != c.target and anchor != c.source:
        # One of them (the usual anchor) is looked up, and found, above already.
        find_combatant(ctx, anchor, "anchor")
    if not 1 <= c.rounds <= MAX_CONDITION_ROUNDS:
        raise reject("invalid_value", "between 1 and {limit}", "rounds", limit=MAX_CONDITION_ROUNDS)
    if c.boundary not in ("start", "end"):
        raise reject("invalid_value", "'start' or 'end'", "boundary")
    check_text(c.note, "note", required=False)
    turn = ctx.state.turn
    skip = c.boundary == "end" and turn is not None and turn.combatant == anchor
    condition = _condition(
        id=f"c{ctx.state.serial + 1}",
        type=c.type,
        target=c.target,
        source=c.source,
        clocks=(_clock(anchor, c.boundary, c.rounds, skip),),
        surprisers=(),
        note=c.note,
    )
    ctx.emit(_applied(condition))


def remove_condition(ctx: Ctx, c: cmd.RemoveCondition) -> None:
    """``remove_condition``: a condition ends before its time."""
    found = next((k for k in ctx.state.conditions if k.id == c.condition), None)
    if found is None:
        raise reject("unknown_condition", "no condition {id!r}", "condition", id=c.condition)
    ctx.emit(_removed(found.target, found.id, found.type, "removed"))


def surprise(ctx: Ctx, c: cmd.Surprise) -> None:
    """``surprise``: marvel's mid-combat surprise (R8), one condition per target, each
    surpriser's next turn start ending it."""
    if not ctx.rules.surprise:
        raise reject("not_in_ruleset", "{ruleset} has no surprise", ruleset=ctx.rules.name)
    require_in_rounds(ctx)
    find_active(ctx, c.target, "target")
    check_names(c.by, "by")
    if not c.by or len(set(c.by)) != len(c.by):
        raise reject("invalid_value", "name who surprised the target, once each", "by")
    for i in c.by:
        find_active(ctx, i, "by")
        if i == c.target:
            raise reject("invalid_target", "a combatant cannot surprise itself", "by")
    existing = next(
        (k for k in ctx.state.conditions if k.type == "surprised" and k.target == c.target), None
    )
    surprisers = tuple(dict.fromkeys((*(existing.surprisers if existing else ()), *c.by)))
    old_clocks = {k.anchor: k for k in existing.clocks} if existing else {}
    # R8: it ends at the start of each surpriser's next turn, the latest of them.
    clocks = tuple(old_clocks.get(i, Clock(i, "start", 1)) for i in surprisers)
    condition = Condition(
        id=existing.id if existing else f"c{ctx.state.serial + 1}",
        type="surprised",
        target=c.target,
        source=c.by[0],
        clocks=clocks,
        surprisers=surprisers,
    )
    ctx.emit(ev.ConditionApplied(condition))
