"""A combat's life and its combatants' (R1, R15, R16): created, joined, removed, defeated,
revived, revealed, ended, and a command undone."""

from __future__ import annotations

from dataclasses import replace

from .. import commands as cmd
from .. import events as ev
from ..model import Actor, Combatant, State
from ..rulebook import RuleBook
from .checks import (
    check_names,
    check_number,
    check_options,
    check_text,
    find_active,
    find_combatant,
)
from .context import MAX_COMBATANTS, MAX_NAME, MAX_SECRETS, Ctx, reject
from .flow import advance, expire_conditions, maybe_close, next_reaction
from .placing import group_of, roll, slot, slot_by_chain


def create_combat(
    state: State, c: cmd.CreateCombat, now: float, actor: Actor, book: RuleBook
) -> list[ev.Event]:
    """``create_combat``: a new combat with its ruleset and options."""
    if actor.role != "narrator":
        raise reject("forbidden", "only a narrator creates a combat", "actor")
    if state.phase != "none":
        raise reject("combat_exists", "this combat already exists", "combat_id")
    check_text(c.combat_id, "combat_id")
    rules = book.ruleset(c.ruleset)
    if rules is None:
        raise reject("unknown_ruleset", "no ruleset {ruleset!r}", "ruleset", ruleset=c.ruleset)
    options = check_options(rules, c.options)
    return [
        ev.CommandRecorded(c.name, actor, now),
        ev.CombatCreated(c.combat_id, c.ruleset, options),
    ]


def add_combatant(ctx: Ctx, c: cmd.AddCombatant) -> None:
    """``add_combatant``: before the order is fixed, or late, slotted by the tie chain (R1)."""
    check_text(c.id, "id", limit=MAX_NAME)
    check_text(c.display_name, "display_name", limit=MAX_NAME)
    if ctx.state.get(c.id) is not None:
        raise reject("duplicate_combatant", "{id!r} is already in this combat", "id", id=c.id)
    if len(ctx.state.combatants) >= MAX_COMBATANTS:
        raise reject(
            "too_many_combatants", "at most {limit} combatants", "id", limit=MAX_COMBATANTS
        )
    if c.hidden:
        _require_room_for_a_secret(ctx, "hidden")
    check_names(c.tags, "tags")
    check_number(c.init_mod, "init_mod")
    check_number(c.dexterity, "dexterity")
    for name, value in (("controller", c.controller), ("group", c.group)):
        if value is not None:
            check_text(value, name, limit=MAX_NAME)
    combatant = Combatant(
        id=c.id,
        name=c.display_name,
        controller=c.controller,
        player_character=c.player_character,
        init_mod=c.init_mod,
        dexterity=c.dexterity,
        group=c.group,
        tags=c.tags,
        hidden=c.hidden,
    )
    ctx.emit(ev.CombatantAdded(combatant))
    in_play = ctx.state.phase in ("bonus_round", "rounds")
    mates = [m for m in group_of(ctx, combatant) if m.id != c.id and m.check is not None]
    if mates:
        # R4: one check per group; a member joining after the group rolled shares its result.
        if c.faces is not None:
            raise reject(
                "already_rolled", "group {group} has rolled already", "faces", group=str(c.group)
            )
        check = mates[0].check
        assert check is not None
        ctx.emit(ev.InitiativeRolled(c.id, (c.id,), check))
        if in_play:
            last = max(ctx.state.order.index(m.id) for m in mates if m.id in ctx.state.order)
            order = (*ctx.state.order[: last + 1], c.id, *ctx.state.order[last + 1 :])
            slot(ctx, c.id, order, None)
    elif c.faces is not None or in_play:
        roll(ctx, combatant, c.faces, 0, 0, members=(c.id,))
        if in_play:
            slot_by_chain(ctx, c.id)
    if in_play and ctx.state.turn is None and ctx.state.window is None:
        advance(ctx, None)


def _cancel_pending(ctx: Ctx, combatant_id: str, reason: str) -> None:
    """A defeated, removed or departing combatant's holds, reservations, claims and the plans
    that pointed at it are cancelled and recorded (R1)."""
    state = ctx.state
    if state.hold_of(combatant_id) is not None:
        ctx.emit(ev.HoldCancelled(combatant_id, reason))
    for h in state.holds:
        if h.target == combatant_id and h.combatant != combatant_id:
            # Back to the named number, if the holder gave one (R9).
            ctx.emit(ev.HoldPlanned(h.combatant, "at" if h.number is not None else None))
    for r in state.reservations:
        if r.combatant == combatant_id:
            ctx.emit(ev.ReservationCancelled(combatant_id, r.id, reason))
    w = ctx.state.window
    if w is not None and w.status == "resolving" and combatant_id in w.sequence[w.index :]:
        ctx.emit(ev.ReactionCancelled(combatant_id, w.id, reason))


def _take_out(ctx: Ctx, combatant_id: str, event: ev.Event, reason: str) -> None:
    w = ctx.state.window
    was_reacting = w is not None and w.status == "resolving" and w.sequence[w.index] == combatant_id
    # The cause before its consequences: the defeat (or removal), then what it cancels.
    ctx.emit(event)
    _cancel_pending(ctx, combatant_id, reason)
    turn = ctx.state.turn
    if turn is not None and turn.combatant == combatant_id:
        ctx.emit(ev.TurnEnded(combatant_id, turn.round, reason))
        expire_conditions(ctx)
    if was_reacting:
        next_reaction(ctx)
    elif ctx.state.window is not None:
        maybe_close(ctx)
    elif ctx.state.turn is None:
        advance(ctx, None)


def remove_combatant(ctx: Ctx, c: cmd.RemoveCombatant) -> None:
    """``remove_combatant``: gone for good, what it had pending cancelled (R1)."""
    find_combatant(ctx, c.combatant)
    _take_out(ctx, c.combatant, ev.CombatantRemoved(c.combatant), "removed")


def defeat_combatant(ctx: Ctx, c: cmd.DefeatCombatant) -> None:
    """``defeat_combatant``: out of the fight, what it had pending cancelled (R1)."""
    find_active(ctx, c.combatant)
    _take_out(ctx, c.combatant, ev.CombatantDefeated(c.combatant), "defeated")


def revive_combatant(ctx: Ctx, c: cmd.ReviveCombatant) -> None:
    """``revive_combatant``: back in the fight like a newcomer (R1)."""
    combatant = find_combatant(ctx, c.combatant)
    if combatant.status != "defeated":
        raise reject("invalid_value", "{name} is not defeated", "combatant", name=combatant.name)
    ctx.emit(ev.CombatantRevived(c.combatant))
    if ctx.state.phase in ("bonus_round", "rounds"):
        if c.combatant not in ctx.state.order:
            slot_by_chain(ctx, c.combatant)
        elif c.combatant not in ctx.state.reached:
            # Back in the fight like a newcomer (R1): if its slot has passed, next round.
            order = ctx.state.order
            if any(o in ctx.state.reached for o in order[order.index(c.combatant) + 1 :]):
                slot(ctx, c.combatant, order, None)
        if ctx.state.turn is None and ctx.state.window is None:
            advance(ctx, None)


def reveal_combatant(ctx: Ctx, c: cmd.RevealCombatant) -> None:
    """``reveal_combatant``: a hidden combatant becomes visible to everyone (R16)."""
    combatant = find_combatant(ctx, c.combatant)
    if not combatant.hidden:
        raise reject("invalid_value", "{name} is not hidden", "combatant", name=combatant.name)
    _require_room_for_a_secret(ctx, "combatant")  # undoing the reveal would start another stretch
    ctx.emit(ev.CombatantRevealed(replace(combatant, hidden=False)))


def _require_room_for_a_secret(ctx: Ctx, field_name: str) -> None:
    if len(ctx.state.secrets) >= MAX_SECRETS:
        raise reject(
            "too_many_secrets",
            "this combat has hidden combatants {limit} times already",
            field_name,
            limit=MAX_SECRETS,
        )


def end_combat(ctx: Ctx, c: cmd.EndCombat) -> None:
    """``end_combat``: everything pending is cancelled and recorded."""
    w = ctx.state.window
    if w is not None:
        pending = (
            w.sequence[w.index :] if w.status == "resolving" else [cl.combatant for cl in w.claims]
        )
        for combatant_id in pending:
            ctx.emit(ev.ReactionCancelled(combatant_id, w.id, "combat_ended"))
        if w.action is not None and w.facts.actor is not None:
            ctx.emit(ev.ActionCancelled(w.facts.actor, w.action, "combat_ended"))
    for h in ctx.state.holds:
        ctx.emit(ev.HoldCancelled(h.combatant, "combat_ended"))
    for r in ctx.state.reservations:
        ctx.emit(ev.ReservationCancelled(r.combatant, r.id, "combat_ended"))
    turn = ctx.state.turn
    if turn is not None:
        ctx.emit(ev.TurnEnded(turn.combatant, turn.round, "combat_ended"))
    ctx.emit(ev.CombatEnded())


def undo(ctx: Ctx, c: cmd.Undo) -> None:
    """``undo``: the last command is undone (R15)."""
    if not ctx.state.undo.reach:
        raise reject("nothing_to_undo", "there is no command left to undo")
    ctx.emit(ev.CommandUndone(ctx.state.last_command))
