"""The turn machine: what starts between two turns (a held turn whose moment came, the next
normal turn, the next round), turns starting and ending, and reaction windows opening,
closing and resolving (R5, R9, R12). Its parts call each other: a turn start may open a window,
whose close may start the next turn."""

from __future__ import annotations

from typing import Literal

from .. import events as ev
from ..evolve import tick_clocks
from ..model import ActionSpec, Hold, TriggerFacts, TurnKind, Window, perceives
from ..order import slot_index
from .context import Ctx
from .placing import order_key


def next_normal(ctx: Ctx) -> str | None:
    """Whose normal turn comes next this round, if anyone's."""
    s = ctx.state
    for i in s.order:
        if i in s.reached or not s.active(i):
            continue
        if s.phase == "bonus_round" and i not in s.bonus:
            continue
        return i
    return None


BELOW_EVERYONE = -(10**9)
"""The count once everyone has acted: where holders with no number of their own stand."""


def advance(ctx: Ctx, last_ended: str | None) -> None:
    """Start whatever comes next between two turns: a held turn whose moment has come, the next
    normal turn (lapsing a hold that reached its own place), or the end of the round (R5, R9)."""
    for _ in range(4 * (len(ctx.state.order) + len(ctx.state.holds) + 2)):
        s = ctx.state
        if s.phase not in ("bonus_round", "rounds") or s.turn is not None or s.window is not None:
            return
        nxt = next_normal(ctx)
        after = [h for h in s.holds if h.plan == "after" and h.target == last_ended]
        due = list(after)
        if nxt is not None:
            nxt_key = order_key(ctx, nxt)
            due += [h for h in s.holds if h.plan == "before" and h.target == nxt]
            due += [h for h in s.holds if h.plan == "at" and _number_key(ctx, h) > nxt_key]
        if due:
            # All of these want the gap between the turn that ended and the next one. The count
            # reaches the highest named number first; otherwise the ruleset's holder priority
            # decides (R9), and those waiting "after" the same turn follow the first in turn.
            moment = place_of(ctx, nxt) if nxt is not None else BELOW_EVERYONE
            first = min(due, key=lambda h: (-_count(ctx, h, moment), priority(ctx, h)))
            for other in after:
                if other is not first:
                    ctx.emit(ev.HoldPlanned(other.combatant, "after", first.combatant))
            if first in after:
                _start_held(ctx, first, "after", last_ended)
            else:
                _start_held(ctx, first, "before", nxt)
            return
        if nxt is not None:
            if s.hold_of(nxt) is not None:
                ctx.emit(ev.HoldLapsed(nxt, s.round or 0))
            _start_turn(ctx, nxt, "normal")
            return
        # Everyone has acted: the count runs on below them, reaching named numbers and (dnd3e,
        # where a delay never carries over) each delayer's floor, highest first.
        pending = [h for h in s.holds if h.plan == "at" or not ctx.rules.holds_carry_over]
        if pending:
            first = min(pending, key=lambda h: (-_count(ctx, h, BELOW_EVERYONE), priority(ctx, h)))
            if first.plan == "at":
                _start_held(ctx, first, "at", None)
            else:
                _start_floor(ctx, first)
            return
        if not any(c.status == "active" for c in s.combatants if c.id in s.order):
            return  # nobody can act: the clock waits for a revive or a newcomer
        current = s.round or 0
        ctx.emit(ev.RoundEnded(current))
        ctx.emit(ev.RoundStarted(current + 1))
        if ctx.opts.get("reaction_refresh") == "round_start":
            for c in ctx.state.combatants:
                if c.status == "active" and not c.reaction:
                    ctx.emit(ev.ReactionRefreshed(c.id))
        last_ended = None
    raise AssertionError("the clock did not settle")  # pragma: no cover - a bug, not input


def place_of(ctx: Ctx, combatant_id: str) -> int:
    """A combatant's number in the order."""
    c = ctx.state.get(combatant_id)
    assert c is not None
    assert c.place is not None
    return c.place


def priority(ctx: Ctx, h: Hold) -> tuple[int, ...]:
    """A holder's place among holders wanting the same moment, lower first (R9)."""
    c = ctx.state.get(h.combatant)
    assert c is not None
    return ctx.rules.holder_priority(c, h.seq)


def _floor(ctx: Ctx, combatant_id: str) -> int | None:
    c = ctx.state.get(combatant_id)
    assert c is not None
    return ctx.rules.delay_floor(c, ctx.opts)


def _count(ctx: Ctx, h: Hold, moment: int) -> int:
    """The initiative count at which a holder is due: its named number; else the moment it
    waits for, or (when nothing is left) its delay floor."""
    if h.plan == "at" and h.number is not None:
        return h.number
    if h.plan in ("before", "after") or moment != BELOW_EVERYONE:
        return moment
    floor = _floor(ctx, h.combatant)
    return floor if floor is not None else BELOW_EVERYONE


def _number_key(ctx: Ctx, h: Hold) -> tuple[int, ...]:
    c = ctx.state.get(h.combatant)
    assert c is not None
    assert h.number is not None
    return ctx.rules.tie_key(c, h.number, c.check.fantastic if c.check else False)


def _start_floor(ctx: Ctx, hold: Hold) -> None:
    """dnd3e: a delay never carries over; at the floor (or, under 3.5, once everyone else has
    acted) the delayer's turn starts, to act now or forfeit the round (R9)."""
    rest = tuple(i for i in ctx.state.order if i != hold.combatant)
    floor = _floor(ctx, hold.combatant)
    place = floor if floor is not None else place_of(ctx, rest[-1] if rest else hold.combatant)
    ctx.emit(ev.PlaceChanged(hold.combatant, place, (*rest, hold.combatant), "delay_floor"))
    if not _let_waiting_go_first(ctx, hold.combatant):
        _start_turn(ctx, hold.combatant, "floor")


def _start_held(
    ctx: Ctx, hold: Hold, where: Literal["before", "after", "at"], anchor: str | None
) -> None:
    """A held turn starts: its place becomes that point for the rest of the combat (R9)."""
    rest = tuple(i for i in ctx.state.order if i != hold.combatant)
    if where == "at":
        assert hold.number is not None
        place = hold.number
        index = slot_index(
            rest, lambda i: order_key(ctx, i), _number_key(ctx, hold), lambda _: False
        )
    else:
        assert anchor is not None
        # A named number keeps its number wherever the count reached it; else X's number.
        place = (
            hold.number if hold.plan == "at" and hold.number is not None else place_of(ctx, anchor)
        )
        index = rest.index(anchor) + (1 if where == "after" else 0)
    order = (*rest[:index], hold.combatant, *rest[index:])
    ctx.emit(ev.PlaceChanged(hold.combatant, place, order, "held_turn"))
    if not _let_waiting_go_first(ctx, hold.combatant):
        _start_turn(ctx, hold.combatant, "held")


def _let_waiting_go_first(ctx: Ctx, combatant_id: str) -> bool:
    """A holder waiting "before X" goes when X's turn would start, even when that turn is
    itself a held or floor turn (R9): it takes X's new place and X follows it."""
    waiting = [h for h in ctx.state.holds if h.plan == "before" and h.target == combatant_id]
    if not waiting:
        return False
    first = min(waiting, key=lambda h: priority(ctx, h))
    ctx.emit(ev.HoldPlanned(combatant_id, "after", first.combatant))
    _start_held(ctx, first, "before", combatant_id)
    return True


def _start_turn(ctx: Ctx, combatant_id: str, kind: TurnKind) -> None:
    for r in ctx.state.reservations:
        if r.combatant == combatant_id:
            ctx.emit(ev.ReservationExpired(combatant_id, r.id))
    c = ctx.state.get(combatant_id)
    assert c is not None
    # A held turn taken later in the same round is the same turn: no second reaction (R6, R9).
    first_start = combatant_id not in ctx.state.reached
    refresh = ctx.opts.get("reaction_refresh", "own_turn") == "own_turn"
    if not c.reaction and refresh and first_start:
        ctx.emit(ev.ReactionRefreshed(combatant_id))
    limit = ctx.opts.get("turn_time_limit")
    deadline = warn_at = None
    if isinstance(limit, float):
        deadline = ctx.now + limit
        warning = ctx.opts.get("turn_warning")
        if isinstance(warning, float) and 0 < warning < limit:
            warn_at = deadline - warning
    if first_start:
        # Conditions that end at the start of this turn are start-of-turn bookkeeping: told
        # before turn_started, like every other (protocol.md, order of events). Its fold then
        # counts the boundary on the conditions left.
        ticked = tick_clocks(ctx.state, combatant_id, "start")
        for condition in ticked.conditions:
            if all(k.remaining == 0 for k in condition.clocks):
                ctx.emit(ev.ConditionExpired(condition.target, condition.id, condition.type))
    round_no = ctx.state.round or 0
    number = ctx.state.turns + 1
    ctx.emit(ev.TurnStarted(combatant_id, round_no, kind, ctx.now, deadline, warn_at, number))
    open_window(ctx, TriggerFacts("turn_started", combatant_id), None, (), only_if_matched=True)


def end_turn_now(ctx: Ctx, reason: str) -> None:
    """End the turn in progress: a refocus takes its new place (R14), conditions
    expire, and the clock moves on."""
    turn = ctx.state.turn
    assert turn is not None
    c = ctx.state.get(turn.combatant)
    assert c is not None
    if turn.kind == "floor" and not turn.acted:
        ctx.emit(ev.DelayForfeited(turn.combatant, turn.round))
    ctx.emit(ev.TurnEnded(turn.combatant, turn.round, reason))
    if turn.refocus and ctx.rules.refocus:
        # R14: from the next round it acts at 20 + its initiative bonus, placed by the tie chain.
        place = ctx.rules.refocus_number(c)
        rest = tuple(i for i in ctx.state.order if i != c.id)
        key = ctx.rules.tie_key(c, place, False)
        index = slot_index(rest, lambda i: order_key(ctx, i), key, lambda _: False)
        order = (*rest[:index], c.id, *rest[index:])
        ctx.emit(ev.PlaceChanged(c.id, place, order, "refocus"))
    expire_conditions(ctx)
    advance(ctx, turn.combatant)


def surprise_edges(ctx: Ctx, actor: str, action: ActionSpec) -> tuple[str, ...]:
    """The edges an attack gets against targets its actor surprised (R8)."""
    if action.kind != "attack":
        return ()
    return tuple(
        f"surprised:{c.target}"
        for c in ctx.state.conditions
        if c.type == "surprised" and c.target in action.targets and actor in c.surprisers
    )


def _perceives(ctx: Ctx, combatant_id: str, actor_id: str | None) -> bool:
    """A hidden combatant's moves never reach a player (R16), so they cannot fire that
    player's reservations: the player could not even see the window to answer it."""
    actor = ctx.state.get(actor_id) if actor_id is not None else None
    c = ctx.state.get(combatant_id)
    return c is not None and perceives(c, actor)


def _can_claim(ctx: Ctx, combatant_id: str) -> bool:
    c = ctx.state.get(combatant_id)
    return (
        c is not None
        and c.status == "active"
        and (c.reaction or not ctx.rules.claim_costs_reaction)
    )


def open_window(
    ctx: Ctx,
    facts: TriggerFacts,
    action: ActionSpec | None,
    offer: tuple[str, ...],
    *,
    only_if_matched: bool,
    announced: bool = False,
) -> bool:
    """Open a reaction window for a trigger-eligible moment (R12). Reservations whose predicate
    matches are offered. With nothing offered and no time to wait, no window is needed."""
    matched = [
        r.combatant
        for r in ctx.state.reservations
        if r.trigger.predicate is not None
        and r.combatant != facts.actor
        and _perceives(ctx, r.combatant, facts.actor)
        and r.trigger.predicate.matches(facts)
    ]
    offered = tuple(
        i for i in ctx.state.order if (i in matched or i in offer) and _can_claim(ctx, i)
    )
    wait = ctx.opts.get("window_deadline")
    deadline = ctx.now + (wait if isinstance(wait, float) else 0.0)
    # An announced moment always opens its window (R12), even if it closes at once.
    quiet = only_if_matched or (deadline <= ctx.now and not offer and not announced)
    if not offered and quiet:
        return False
    window = Window(f"w{ctx.state.serial + 1}", facts, ctx.now, deadline, offered, action)
    ctx.emit(ev.WindowOpened(window))
    maybe_close(ctx)
    return True


def maybe_close(ctx: Ctx) -> None:
    """Close an open window once every offered answer is in, or its deadline passed (R12)."""
    w = ctx.state.window
    if w is None or w.status != "open":
        return
    answered = {cl.combatant for cl in w.claims} | set(w.passes)
    waiting = [i for i in w.offered if i not in answered and ctx.state.active(i)]
    # R12: every offered reserver answering closes it; so does a deadline, answered or not.
    # A deadline of 0 s sets no wait: the window waits for the offered answers alone.
    if (not waiting and (w.offered or ctx.now >= w.deadline)) or (
        w.has_deadline and ctx.now >= w.deadline
    ):
        close_now(ctx, "answered")


def close_now(ctx: Ctx, reason: str) -> None:
    """Close the window: claims are put in sequence (R12) and the first reaction starts;
    with none, the trigger's own action goes ahead."""
    w = ctx.state.window
    assert w is not None
    for cl in w.claims:
        if not ctx.state.active(cl.combatant):
            ctx.emit(ev.ReactionCancelled(cl.combatant, w.id, "inactive"))
    w = ctx.state.window
    assert w is not None
    ctx.emit(ev.WindowClosed(w.id, reason))
    if not w.claims:
        _after_window(ctx, w)
        return
    claims = []
    for cl in w.claims:
        c = ctx.state.get(cl.combatant)
        assert c is not None
        claims.append((c, cl))
    ordered = ctx.rules.order_claims(claims, ctx.state.order, ctx.dice)
    ctx.emit(ev.SequenceOrdered(w.id, ordered.sequence, ordered.checks, ordered.rolloffs))
    next_reaction(ctx)


def next_reaction(ctx: Ctx) -> None:
    """Start the next claimed reaction in the window's sequence, or end the sequence."""
    while True:
        w = ctx.state.window
        assert w is not None
        if w.index >= len(w.sequence):
            ctx.emit(ev.SequenceEnded(w.id))
            _after_window(ctx, w)
            return
        current = w.sequence[w.index]
        if not ctx.state.active(current):
            ctx.emit(ev.ReactionCancelled(current, w.id, "inactive"))
            continue
        claim = next(cl for cl in w.claims if cl.combatant == current)
        edges = surprise_edges(ctx, current, claim.action)
        ctx.emit(ev.ReactionStarted(current, w.id, claim.action, edges))
        return


def _after_window(ctx: Ctx, w: Window) -> None:
    """The trigger's own action goes ahead, or is cancelled if its actor is out (R12)."""
    actor = w.facts.actor
    if w.action is not None and actor is not None:
        if ctx.state.active(actor):
            ctx.emit(ev.ActionResolved(actor, w.action))
        else:
            ctx.emit(ev.ActionCancelled(actor, w.action, "actor_out"))
    if ctx.state.turn is None:
        advance(ctx, None)


def expire_conditions(ctx: Ctx) -> None:
    """Conditions whose every clock ran out end now."""
    for c in ctx.state.conditions:
        if all(k.remaining == 0 for k in c.clocks):
            ctx.emit(ev.ConditionExpired(c.target, c.id, c.type))
