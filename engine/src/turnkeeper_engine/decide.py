"""``decide(state, command, now) -> events | RuleError``: every rule of R1–R16 that is not I/O.

A command is checked against the state; if it is legal its events are produced. While deciding,
each event is folded into a working copy of the state at once (``_Ctx.emit``), so later steps of
the same command see its earlier effects, and the events returned always fold to the state the
engine reasoned about.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from . import commands as cmd
from . import events as ev
from .dice import DiceSource, SystemDice
from .errors import Arg, Rejected, RuleError
from .evolve import evolve, tick_clocks
from .model import (
    NARRATOR,
    ActionSpec,
    Actor,
    Check,
    Claim,
    Clock,
    Combatant,
    Condition,
    Hold,
    OptionValue,
    Predicate,
    Reservation,
    RollOff,
    State,
    TriggerFacts,
    Turn,
    TurnKind,
    Window,
    perceives,
)
from .order import Unit, roll_off, slot_index, sort_units
from .plain import encoded_size
from .registry import CONDITION_TYPES
from .rulesets import RULESETS, Ruleset
from .views import view

MAX_REROLLS = 10
"""Edges or troubles on one check: more has no meaning at a table and would only cost rolls."""
MAX_SECONDS = 86_400.0
"""Longest time option (turn limit, warning, window wait): a day; also refuses NaN and inf."""
MIN_TURN_SECONDS = 1.0
"""Shortest turn time limit (R13): less is no time for a person to act, and a limit of 0 would
expire each turn as it starts, so the clock would record events without end. A window wait or a
warning needs no such floor: the clock closes a window once, and only a command or a turn start
(bounded by this) opens one."""
MAX_CONDITION_ROUNDS = 1000
"""Longest condition duration accepted, in turn boundaries."""
MAX_COMBATANTS = 500
"""Combatants in one combat, removed ones included: a battle of hundreds is still a table's
game. What they may carry in all is bounded by ``MAX_VIEW_BYTES``."""
MAX_NAME = 128
"""Longest id, name, tag or zone: they label things, they are not documents."""
MAX_ITEMS = 32
"""Most tags, targets or predicate terms in one list: enough for any table, and a bound on what
one command can make every later event and view carry."""
MAX_NUMBER = 1_000_000
"""Largest initiative modifier, Dexterity or named number, either sign: far beyond any rules,
well inside every integer encoding."""
MAX_TEXT = 2000
"""Longest free text (names, descriptions, triggers) the engine keeps."""
MAX_SECRETS = 1000
"""Hidden stretches one combat records (``State.secrets``): each hidden addition and each
reveal may start one, and the record is kept for good (R16), so a narrator adding and undoing
hidden combatants must not grow it, and every later read of the log, without bound. Twice
``MAX_COMBATANTS``; an undone reveal may start one more, at most ``UNDO_DEPTH`` of them."""
MAX_VIEW_BYTES = 960 * 1024
"""Largest a combat may grow, counted as its whole view encoded (the narrator's: every other
role's is a part of it). The limits above bound one item each, and their product is many
megabytes; this bounds the sum, so a combat's view always fits in one protocol message
(1 MiB) with the response around it. Commands that add content are held to it with room left
for play (``PLAY_BYTES``, ``PLAY_IDS``, ``PLAY_FIXED``, ``PLAY_PLUGINS``), so the others never
need refusing: a combat full of content can still be played to its end."""
PLAY_BYTES = 1280
"""Room kept per combatant for what play adds besides its ids: its check once rolled (the dice,
ten rerolls, who supplied them) and the numbers of its hold and of its claim in a window."""
PLAY_IDS = 7
"""Room kept per combatant, in ids as long as the combat's longest: its place in the order,
its hold and the combatant the hold names, its entries in a window's ``offered``, ``passes``
and ``sequence``, and its claim."""
PLAY_FIXED = 4096
"""Room kept once per combat: the turn in progress and a turn start's window."""
MAX_DISABLED_PLUGINS = 32
"""Plugins one combat may have disabled at once: far more than a daemon loads (it bundles
four). Room is kept for all of them (``PLAY_PLUGINS``) rather than holding ``disable_plugin`` to
``MAX_VIEW_BYTES``: it is how the daemon stops a failing plugin, which a full combat must not
refuse."""
PLAY_PLUGINS = MAX_DISABLED_PLUGINS * (4 * MAX_NAME + 3) + 2
"""Room kept once per combat for ``MAX_DISABLED_PLUGINS`` names in ``disabled_plugins``, each
as long as allowed in four-byte characters with its 3-byte header, and the 2 bytes more the
list's header then takes."""


@dataclass
class _Ctx:
    state: State
    now: float
    actor: Actor
    dice: DiceSource
    rules: Ruleset
    events: list[ev.Event] = field(default_factory=list)

    def emit(self, event: ev.Event) -> None:
        self.events.append(event)
        self.state = evolve(self.state, event)

    @property
    def opts(self) -> dict[str, OptionValue]:
        return dict(self.state.options)


def _reject(code: str, template: str, field_name: str = "", **args: Arg) -> Rejected:
    """A refusal; ``template`` is a string literal, its pieces passed by name (see Rejected)."""
    return Rejected(code, template, field_name, **args)


def decide(
    state: State,
    command: cmd.Command,
    now: float,
    *,
    actor: Actor = NARRATOR,
    dice: DiceSource | None = None,
) -> list[ev.Event] | RuleError:
    """Decide what ``command`` does to ``state`` at time ``now`` (seconds, from the caller's
    clock: the engine never reads one, R13). Returns the events, or the rule error that refused
    the command, in which case nothing changes."""
    try:
        return _decide(state, command, now, actor, dice or SystemDice())
    except Rejected as refused:
        return refused.error


def _decide(
    state: State, command: cmd.Command, now: float, actor: Actor, dice: DiceSource
) -> list[ev.Event]:
    if isinstance(command, cmd.CreateCombat):
        return _create(state, command, now, actor)
    if state.phase == "none":
        raise _reject("no_combat", "there is no combat yet: create one first")
    if state.phase == "ended" and not isinstance(command, cmd.Undo):
        raise _reject("combat_ended", "the combat has ended")
    rules = RULESETS.get(state.ruleset)
    if rules is None:
        raise _reject(
            "unknown_ruleset",
            "ruleset {ruleset!r} is not registered",
            "ruleset",
            ruleset=state.ruleset,
        )
    ctx = _Ctx(state, now, actor, dice, rules)
    _authorize(ctx, command)
    ctx.emit(ev.CommandRecorded(command.name, actor, now))
    _HANDLERS[type(command)](ctx, command)
    if isinstance(command, cmd.Tick) and len(ctx.events) == 1:
        return []  # nothing was due: a tick that changes nothing is not recorded
    if type(command) in _ADDS_CONTENT:
        _within_size(ctx)
    return ctx.events


_ADDS_CONTENT = frozenset(
    {
        cmd.AddCombatant,
        cmd.ApplyCondition,
        cmd.Surprise,
        cmd.Reserve,
        cmd.DeclareAction,
        cmd.AnnounceTrigger,
        cmd.ClaimReaction,
    }
)
"""Commands that put what a table chose (text, conditions, reservations) into the state: the
only ones held to ``MAX_VIEW_BYTES``. What every other command adds is bounded per combatant
(or, for disabled plugins, per combat) and kept room for."""


def _within_size(ctx: _Ctx) -> None:
    state = ctx.state
    longest = max((encoded_size(c.id) for c in state.combatants), default=0)
    room = PLAY_FIXED + PLAY_PLUGINS + len(state.combatants) * (PLAY_BYTES + PLAY_IDS * longest)
    size = encoded_size(view(state, NARRATOR)) + room
    if size > MAX_VIEW_BYTES:
        raise _reject(
            "combat_too_large",
            "the combat would grow to {size} bytes with room for play, over its limit of {limit}",
            size=size,
            limit=MAX_VIEW_BYTES,
        )


# ---------------------------------------------------------------------------------- permission

_NARRATOR_ONLY = frozenset(
    {
        cmd.AddCombatant,
        cmd.RemoveCombatant,
        cmd.DefeatCombatant,
        cmd.ReviveCombatant,
        cmd.RevealCombatant,
        cmd.MarkSurprised,
        cmd.ReorderGroup,
        cmd.StartCombat,
        cmd.AnnounceTrigger,
        cmd.CloseWindow,
        cmd.ApplyCondition,
        cmd.RemoveCondition,
        cmd.Surprise,
        cmd.RecordOutcome,
        cmd.DisablePlugin,
        cmd.EnablePlugin,
        cmd.Tick,
        cmd.Undo,
        cmd.EndCombat,
    }
)


def _acted_on(command: cmd.Command) -> tuple[str, ...]:
    """The combatants a player's command acts for: each must be the player's own (R16)."""
    if isinstance(command, cmd.OrderTies):
        return command.combatants
    turn = getattr(command, "turn", None)
    if turn is not None:
        return (turn.combatant,)
    return (str(command.combatant),) if hasattr(command, "combatant") else ()


def _authorize(ctx: _Ctx, command: cmd.Command) -> None:
    role = ctx.actor.role
    if role == "narrator":
        return
    if role == "observer":
        raise _reject("forbidden", "observers may only read", "actor")
    if type(command) in _NARRATOR_ONLY:
        raise _reject("forbidden", "only the narrator may {command}", "actor", command=command.name)
    for combatant_id in _acted_on(command):
        c = ctx.state.get(combatant_id)
        if c is None or c.controller is None or c.controller != ctx.actor.user:
            raise _reject(
                "forbidden", "{id!r} is not yours to act for", "combatant", id=combatant_id
            )


# ------------------------------------------------------------------------------------- helpers


def _combatant(ctx: _Ctx, combatant_id: str, field_name: str = "combatant") -> Combatant:
    c = ctx.state.get(combatant_id)
    # To anyone who may not see a hidden combatant, it does not exist (R16).
    unseen = (
        c is not None
        and c.hidden
        and ctx.actor.role != "narrator"
        and (c.controller is None or c.controller != ctx.actor.user)
    )
    if c is None or c.status == "removed" or unseen:
        raise _reject("unknown_combatant", "no combatant {id!r}", field_name, id=combatant_id)
    return c


def _active(ctx: _Ctx, combatant_id: str, field_name: str = "combatant") -> Combatant:
    c = _combatant(ctx, combatant_id, field_name)
    if c.status != "active":  # a removed one is refused above: this one is defeated
        raise _reject("combatant_inactive", "{name} is defeated", field_name, name=c.name)
    return c


def _text(value: str, field_name: str, *, required: bool = True, limit: int = MAX_TEXT) -> None:
    if required and not value.strip():
        raise _reject("invalid_value", "must not be empty", field_name)
    if len(value) > limit:
        raise _reject("invalid_value", "longer than {limit} characters", field_name, limit=limit)


def _names(values: tuple[str, ...], field_name: str) -> None:
    """A short list of short names: tags, zones, targets, predicate terms."""
    if len(values) > MAX_ITEMS:
        raise _reject("invalid_value", "at most {limit} items", field_name, limit=MAX_ITEMS)
    for value in values:
        _text(value, field_name, limit=MAX_NAME)


def _number(value: int, field_name: str) -> None:
    if not -MAX_NUMBER <= value <= MAX_NUMBER:
        raise _reject("invalid_value", "between -{limit} and {limit}", field_name, limit=MAX_NUMBER)


def _in_rounds(ctx: _Ctx) -> None:
    if ctx.state.phase not in ("bonus_round", "rounds"):
        raise _reject("wrong_phase", "not possible in phase {phase}", phase=ctx.state.phase)


def _current_turn(ctx: _Ctx, ref: Any) -> Turn:
    _in_rounds(ctx)
    turn = ctx.state.turn
    if turn is None or not turn.named_by(ref):
        raise _reject("stale_turn", "that turn is not the current turn", "turn")
    return turn


def _no_window(ctx: _Ctx) -> None:
    if ctx.state.window is not None:
        raise _reject("window_open", "a reaction window is open; resolve it first", "window")


def _key(ctx: _Ctx, combatant_id: str) -> tuple[int, ...]:
    c = ctx.state.get(combatant_id)
    assert c is not None
    assert c.place is not None
    return ctx.rules.tie_key(c, c.place, c.check.fantastic if c.check else False)


def _action_type(ctx: _Ctx, action: ActionSpec, field_name: str = "action") -> ActionSpec:
    """Resolve an action's type from the catalogue (R6) or its own statement."""
    _text(action.kind, f"{field_name}.kind", limit=MAX_NAME)
    _text(action.description, f"{field_name}.description", required=False)
    _names(action.targets, f"{field_name}.targets")
    _names(action.tags, f"{field_name}.tags")
    if action.zone is not None:
        _text(action.zone, f"{field_name}.zone", limit=MAX_NAME)
    for target in action.targets:
        _combatant(ctx, target, f"{field_name}.targets")
    known = ctx.rules.action_type(action.kind)
    if known is None and action.type is None:
        raise _reject(
            "unknown_action_kind",
            "{kind!r} is not in the {ruleset} catalogue: state its action type",
            f"{field_name}.kind",
            kind=action.kind,
            ruleset=ctx.rules.name,
        )
    if known is not None and action.type is not None and action.type != known:
        raise _reject(
            "action_type_mismatch",
            "{kind!r} needs a {action_type} action, not {other_action_type}",
            f"{field_name}.type",
            kind=action.kind,
            action_type=known,
            other_action_type=action.type,
        )
    resolved = known or action.type
    assert resolved is not None
    if resolved not in ctx.rules.action_types:
        raise _reject(
            "invalid_action_type",
            "{type!r} is not an action type of {ruleset}",
            f"{field_name}.type",
            type=resolved,
            ruleset=ctx.rules.name,
        )
    return replace(action, type=resolved)


def _validate_options(
    rules: Ruleset, given: tuple[tuple[str, OptionValue], ...]
) -> tuple[tuple[str, OptionValue], ...]:
    spec = rules.all_options()
    values: dict[str, OptionValue] = {name: default for name, (default, _) in spec.items()}
    for name, value in given:
        if name not in spec:
            raise _reject(
                "unknown_option",
                "{ruleset} has no option {option!r}",
                f"options.{name}",
                ruleset=rules.name,
                option=name,
            )
        allowed = spec[name][1]
        if allowed is float:
            _seconds(name, value)
            ok = True
        elif isinstance(allowed, tuple):
            ok = value in allowed
        else:
            ok = isinstance(value, allowed)
        if not ok:
            raise _reject(
                "invalid_option",
                "{value} is not valid for {option}",
                f"options.{name}",
                value=repr(value),  # the option's value may be None or a bool: not an Arg
                option=name,
            )
        values[name] = float(value) if isinstance(value, int) and allowed is float else value
    return tuple(sorted(values.items()))


def _seconds(name: str, value: OptionValue) -> None:
    """A time option: nil, or seconds up to ``MAX_SECONDS``; a turn limit no less than
    ``MIN_TURN_SECONDS``."""
    low = MIN_TURN_SECONDS if name == "turn_time_limit" else 0.0
    if value is None or (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and low <= value <= MAX_SECONDS
    ):
        return
    raise _reject(
        "invalid_option",
        "{option}: nil, or from {low} to {high} seconds",
        f"options.{name}",
        option=name,
        low=low,
        high=MAX_SECONDS,
    )


# ------------------------------------------------------------------------------------ lifecycle


def _create(state: State, c: cmd.CreateCombat, now: float, actor: Actor) -> list[ev.Event]:
    if actor.role != "narrator":
        raise _reject("forbidden", "only a narrator creates a combat", "actor")
    if state.phase != "none":
        raise _reject("combat_exists", "this combat already exists", "combat_id")
    _text(c.combat_id, "combat_id")
    rules = RULESETS.get(c.ruleset)
    if rules is None:
        raise _reject("unknown_ruleset", "no ruleset {ruleset!r}", "ruleset", ruleset=c.ruleset)
    options = _validate_options(rules, c.options)
    return [
        ev.CommandRecorded(c.name, actor, now),
        ev.CombatCreated(c.combat_id, c.ruleset, options),
    ]


def _add(ctx: _Ctx, c: cmd.AddCombatant) -> None:
    _text(c.id, "id", limit=MAX_NAME)
    _text(c.display_name, "display_name", limit=MAX_NAME)
    if ctx.state.get(c.id) is not None:
        raise _reject("duplicate_combatant", "{id!r} is already in this combat", "id", id=c.id)
    if len(ctx.state.combatants) >= MAX_COMBATANTS:
        raise _reject(
            "too_many_combatants", "at most {limit} combatants", "id", limit=MAX_COMBATANTS
        )
    if c.hidden:
        _room_for_a_secret(ctx, "hidden")
    _names(c.tags, "tags")
    _number(c.init_mod, "init_mod")
    _number(c.dexterity, "dexterity")
    for name, value in (("controller", c.controller), ("group", c.group)):
        if value is not None:
            _text(value, name, limit=MAX_NAME)
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
    mates = [m for m in _group(ctx, combatant) if m.id != c.id and m.check is not None]
    if mates:
        # R4: one check per group; a member joining after the group rolled shares its result.
        if c.faces is not None:
            raise _reject(
                "already_rolled", "group {group} has rolled already", "faces", group=str(c.group)
            )
        check = mates[0].check
        assert check is not None
        ctx.emit(ev.InitiativeRolled(c.id, (c.id,), check))
        if in_play:
            last = max(ctx.state.order.index(m.id) for m in mates if m.id in ctx.state.order)
            order = (*ctx.state.order[: last + 1], c.id, *ctx.state.order[last + 1 :])
            _slot(ctx, c.id, order, None)
    elif c.faces is not None or in_play:
        _roll(ctx, combatant, c.faces, 0, 0, members=(c.id,))
        if in_play:
            _slot_by_chain(ctx, c.id)
    if in_play and ctx.state.turn is None and ctx.state.window is None:
        _advance(ctx, None)


def _slot_by_chain(ctx: _Ctx, combatant_id: str) -> None:
    """Place a late arrival by the tie chain, rolling off exact ties as they come (R1, R4)."""
    new_key = _key(ctx, combatant_id)
    passes: list[tuple[tuple[str, int], ...]] = []

    def wins_tie(other: str) -> bool:
        order, rolloff = roll_off([combatant_id, other], ctx.dice, ctx.rules.rolloff_sides)
        passes.extend(rolloff.passes)
        return order[0] == combatant_id

    index = slot_index(ctx.state.order, lambda i: _key(ctx, i), new_key, wins_tie)
    order = (*ctx.state.order[:index], combatant_id, *ctx.state.order[index:])
    rolloff = RollOff(ctx.rules.rolloff_sides, tuple(passes)) if passes else None
    _slot(ctx, combatant_id, order, rolloff)


def _slot(ctx: _Ctx, combatant_id: str, order: tuple[str, ...], rolloff: Any) -> None:
    index = order.index(combatant_id)
    passed = any(other in ctx.state.reached for other in order[index + 1 :])
    ctx.emit(ev.CombatantSlotted(combatant_id, order, passed, rolloff))


def _group(ctx: _Ctx, c: Combatant) -> list[Combatant]:
    if c.group is None:
        return [c]
    return [m for m in ctx.state.combatants if m.group == c.group and m.status != "removed"]


def _cancel_pending(ctx: _Ctx, combatant_id: str, reason: str) -> None:
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


def _take_out(ctx: _Ctx, combatant_id: str, event: ev.Event, reason: str) -> None:
    w = ctx.state.window
    was_reacting = w is not None and w.status == "resolving" and w.sequence[w.index] == combatant_id
    # The cause before its consequences: the defeat (or removal), then what it cancels.
    ctx.emit(event)
    _cancel_pending(ctx, combatant_id, reason)
    turn = ctx.state.turn
    if turn is not None and turn.combatant == combatant_id:
        ctx.emit(ev.TurnEnded(combatant_id, turn.round, reason))
        _expire_conditions(ctx)
    if was_reacting:
        _next_reaction(ctx)
    elif ctx.state.window is not None:
        _maybe_close(ctx)
    elif ctx.state.turn is None:
        _advance(ctx, None)


def _remove(ctx: _Ctx, c: cmd.RemoveCombatant) -> None:
    _combatant(ctx, c.combatant)
    _take_out(ctx, c.combatant, ev.CombatantRemoved(c.combatant), "removed")


def _defeat(ctx: _Ctx, c: cmd.DefeatCombatant) -> None:
    _active(ctx, c.combatant)
    _take_out(ctx, c.combatant, ev.CombatantDefeated(c.combatant), "defeated")


def _revive(ctx: _Ctx, c: cmd.ReviveCombatant) -> None:
    combatant = _combatant(ctx, c.combatant)
    if combatant.status != "defeated":
        raise _reject("invalid_value", "{name} is not defeated", "combatant", name=combatant.name)
    ctx.emit(ev.CombatantRevived(c.combatant))
    if ctx.state.phase in ("bonus_round", "rounds"):
        if c.combatant not in ctx.state.order:
            _slot_by_chain(ctx, c.combatant)
        elif c.combatant not in ctx.state.reached:
            # Back in the fight like a newcomer (R1): if its slot has passed, next round.
            order = ctx.state.order
            if any(o in ctx.state.reached for o in order[order.index(c.combatant) + 1 :]):
                _slot(ctx, c.combatant, order, None)
        if ctx.state.turn is None and ctx.state.window is None:
            _advance(ctx, None)


def _reveal(ctx: _Ctx, c: cmd.RevealCombatant) -> None:
    combatant = _combatant(ctx, c.combatant)
    if not combatant.hidden:
        raise _reject("invalid_value", "{name} is not hidden", "combatant", name=combatant.name)
    _room_for_a_secret(ctx, "combatant")  # undoing the reveal would start another stretch
    ctx.emit(ev.CombatantRevealed(replace(combatant, hidden=False)))


def _room_for_a_secret(ctx: _Ctx, field_name: str) -> None:
    if len(ctx.state.secrets) >= MAX_SECRETS:
        raise _reject(
            "too_many_secrets",
            "this combat has hidden combatants {limit} times already",
            field_name,
            limit=MAX_SECRETS,
        )


def _end_combat(ctx: _Ctx, c: cmd.EndCombat) -> None:
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


def _undo(ctx: _Ctx, c: cmd.Undo) -> None:
    if not ctx.state.undo:
        raise _reject("nothing_to_undo", "there is no command left to undo")
    ctx.emit(ev.CommandUndone(ctx.state.last_command))


# ----------------------------------------------------------------------------------- initiative


def _before_order(ctx: _Ctx) -> None:
    if ctx.state.phase not in ("setup", "initiative"):
        raise _reject("wrong_phase", "the initiative order is already fixed")


def _mark_surprised(ctx: _Ctx, c: cmd.MarkSurprised) -> None:
    if not ctx.rules.surprise:
        raise _reject(
            "not_in_ruleset", "{ruleset} has no surprise at combat start", ruleset=ctx.rules.name
        )
    _before_order(ctx)
    combatant = _active(ctx, c.combatant)
    if combatant.check is not None:
        raise _reject("already_rolled", "surprise must come before the initiative check")
    if combatant.surprised:
        raise _reject(
            "invalid_value", "{name} is already surprised", "combatant", name=combatant.name
        )
    ctx.emit(ev.SurpriseMarked(c.combatant))


def _roll(
    ctx: _Ctx,
    combatant: Combatant,
    faces: tuple[int, ...] | None,
    edges: int,
    troubles: int,
    members: tuple[str, ...],
) -> None:
    for name, count in (("edges", edges), ("troubles", troubles)):
        if not 0 <= count <= MAX_REROLLS:
            raise _reject("invalid_value", "between 0 and {limit}", name, limit=MAX_REROLLS)
    if edges and not ctx.rules.surprise:
        raise _reject(
            "not_in_ruleset", "{ruleset} checks have no edges", "edges", ruleset=ctx.rules.name
        )
    if troubles and not ctx.rules.surprise:
        raise _reject(
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


def _roll_initiative(ctx: _Ctx, c: cmd.RollInitiative) -> None:
    _before_order(ctx)
    combatant = _combatant(ctx, c.combatant)
    group = _group(ctx, combatant)
    if any(m.check is not None for m in group):
        raise _reject(
            "already_rolled", "{name} has rolled already", "combatant", name=combatant.name
        )
    _roll(ctx, combatant, c.faces, c.edges, c.troubles, tuple(m.id for m in group))


def _order_ties(ctx: _Ctx, c: cmd.OrderTies) -> None:
    if not ctx.rules.supplied_tie_order:
        raise _reject(
            "not_in_ruleset", "{ruleset} breaks ties by roll-off only", ruleset=ctx.rules.name
        )
    _before_order(ctx)
    if len(c.combatants) < 2 or len(set(c.combatants)) != len(c.combatants):
        raise _reject("invalid_value", "name two or more distinct combatants", "combatants")
    for i in c.combatants:
        _combatant(ctx, i, "combatants")
    ctx.emit(ev.TiesOrdered(c.combatants))


def _reorder_group(ctx: _Ctx, c: cmd.ReorderGroup) -> None:
    members = {m.id for m in ctx.state.combatants if m.group == c.group and m.status != "removed"}
    if not members:
        raise _reject("unknown_group", "no group {group!r}", "group", group=c.group)
    if set(c.combatants) != members or len(c.combatants) != len(members):
        raise _reject("invalid_value", "name every member of the group once", "combatants")
    ctx.emit(ev.GroupReordered(c.group, c.combatants))


def _start(ctx: _Ctx, c: cmd.StartCombat) -> None:
    _before_order(ctx)
    present = [m for m in ctx.state.combatants if m.status != "removed"]
    if not any(m.status == "active" for m in present):
        raise _reject("no_combatants", "add at least one active combatant first")
    for m in present:
        current = ctx.state.get(m.id)
        if current is not None and current.check is None:
            _roll(ctx, current, None, 0, 0, tuple(g.id for g in _group(ctx, current)))
    units: list[Unit] = []
    seen: set[str] = set()
    for m in ctx.state.combatants:
        if m.status == "removed" or m.id in seen:
            continue
        members = tuple(g.id for g in _group(ctx, m))
        seen.update(members)
        units.append(Unit(members, _key(ctx, m.id)))
    ordered, rolloffs = sort_units(
        units,
        ctx.dice,
        ctx.rules.rolloff_sides,
        ctx.state.tie_order if ctx.rules.supplied_tie_order else (),
    )
    order = tuple(i for u in ordered for i in u.members)
    bonus: tuple[str, ...] = ()
    if ctx.rules.bonus_round:
        bonus = tuple(
            i
            for i in order
            if (b := ctx.state.get(i)) is not None
            and b.status == "active"
            and b.check is not None
            and b.check.fantastic
            and not b.surprised
        )
    ctx.emit(ev.CombatStarted(order, tuple(rolloffs), bonus))
    ctx.emit(ev.RoundStarted(0 if bonus else 1))
    _advance(ctx, None)


# ------------------------------------------------------------------------------------- the clock


def _next_normal(ctx: _Ctx) -> str | None:
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


def _advance(ctx: _Ctx, last_ended: str | None) -> None:
    """Start whatever comes next between two turns: a held turn whose moment has come, the next
    normal turn (lapsing a hold that reached its own place), or the end of the round (R5, R9)."""
    for _ in range(4 * (len(ctx.state.order) + len(ctx.state.holds) + 2)):
        s = ctx.state
        if s.phase not in ("bonus_round", "rounds") or s.turn is not None or s.window is not None:
            return
        nxt = _next_normal(ctx)
        after = [h for h in s.holds if h.plan == "after" and h.target == last_ended]
        due = list(after)
        if nxt is not None:
            nxt_key = _key(ctx, nxt)
            due += [h for h in s.holds if h.plan == "before" and h.target == nxt]
            due += [h for h in s.holds if h.plan == "at" and _number_key(ctx, h) > nxt_key]
        if due:
            # All of these want the gap between the turn that ended and the next one. The count
            # reaches the highest named number first; otherwise the ruleset's holder priority
            # decides (R9), and those waiting "after" the same turn follow the first in turn.
            moment = _place(ctx, nxt) if nxt is not None else BELOW_EVERYONE
            first = min(due, key=lambda h: (-_count(ctx, h, moment), _prio(ctx, h)))
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
            first = min(pending, key=lambda h: (-_count(ctx, h, BELOW_EVERYONE), _prio(ctx, h)))
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


def _place(ctx: _Ctx, combatant_id: str) -> int:
    c = ctx.state.get(combatant_id)
    assert c is not None
    assert c.place is not None
    return c.place


def _prio(ctx: _Ctx, h: Hold) -> tuple[int, ...]:
    c = ctx.state.get(h.combatant)
    assert c is not None
    return ctx.rules.holder_priority(c, h.seq)


def _floor(ctx: _Ctx, combatant_id: str) -> int | None:
    c = ctx.state.get(combatant_id)
    assert c is not None
    return ctx.rules.delay_floor(c, ctx.opts)


def _count(ctx: _Ctx, h: Hold, moment: int) -> int:
    """The initiative count at which a holder is due: its named number; else the moment it
    waits for, or (when nothing is left) its delay floor."""
    if h.plan == "at" and h.number is not None:
        return h.number
    if h.plan in ("before", "after") or moment != BELOW_EVERYONE:
        return moment
    floor = _floor(ctx, h.combatant)
    return floor if floor is not None else BELOW_EVERYONE


def _number_key(ctx: _Ctx, h: Hold) -> tuple[int, ...]:
    c = ctx.state.get(h.combatant)
    assert c is not None
    assert h.number is not None
    return ctx.rules.tie_key(c, h.number, c.check.fantastic if c.check else False)


def _start_floor(ctx: _Ctx, hold: Hold) -> None:
    """dnd3e: a delay never carries over; at the floor (or, under 3.5, once everyone else has
    acted) the delayer's turn starts, to act now or forfeit the round (R9)."""
    rest = tuple(i for i in ctx.state.order if i != hold.combatant)
    floor = _floor(ctx, hold.combatant)
    place = floor if floor is not None else _place(ctx, rest[-1] if rest else hold.combatant)
    ctx.emit(ev.PlaceChanged(hold.combatant, place, (*rest, hold.combatant), "delay_floor"))
    if not _let_waiting_go_first(ctx, hold.combatant):
        _start_turn(ctx, hold.combatant, "floor")


def _start_held(
    ctx: _Ctx, hold: Hold, where: Literal["before", "after", "at"], anchor: str | None
) -> None:
    """A held turn starts: its place becomes that point for the rest of the combat (R9)."""
    rest = tuple(i for i in ctx.state.order if i != hold.combatant)
    if where == "at":
        assert hold.number is not None
        place = hold.number
        index = slot_index(rest, lambda i: _key(ctx, i), _number_key(ctx, hold), lambda _: False)
    else:
        assert anchor is not None
        # A named number keeps its number wherever the count reached it; else X's number.
        place = (
            hold.number if hold.plan == "at" and hold.number is not None else _place(ctx, anchor)
        )
        index = rest.index(anchor) + (1 if where == "after" else 0)
    order = (*rest[:index], hold.combatant, *rest[index:])
    ctx.emit(ev.PlaceChanged(hold.combatant, place, order, "held_turn"))
    if not _let_waiting_go_first(ctx, hold.combatant):
        _start_turn(ctx, hold.combatant, "held")


def _let_waiting_go_first(ctx: _Ctx, combatant_id: str) -> bool:
    """A holder waiting "before X" goes when X's turn would start, even when that turn is
    itself a held or floor turn (R9): it takes X's new place and X follows it."""
    waiting = [h for h in ctx.state.holds if h.plan == "before" and h.target == combatant_id]
    if not waiting:
        return False
    first = min(waiting, key=lambda h: _prio(ctx, h))
    ctx.emit(ev.HoldPlanned(combatant_id, "after", first.combatant))
    _start_held(ctx, first, "before", combatant_id)
    return True


def _start_turn(ctx: _Ctx, combatant_id: str, kind: TurnKind) -> None:
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
    _open_window(ctx, TriggerFacts("turn_started", combatant_id), None, (), only_if_matched=True)


def _end_turn_now(ctx: _Ctx, reason: str) -> None:
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
        index = slot_index(rest, lambda i: _key(ctx, i), key, lambda _: False)
        order = (*rest[:index], c.id, *rest[index:])
        ctx.emit(ev.PlaceChanged(c.id, place, order, "refocus"))
    _expire_conditions(ctx)
    _advance(ctx, turn.combatant)


def _end_turn(ctx: _Ctx, c: cmd.EndTurn) -> None:
    _current_turn(ctx, c.turn)
    _no_window(ctx)
    _end_turn_now(ctx, "ended")


def _hold_now(
    ctx: _Ctx,
    number: int | None,
    when: Literal["before", "after"] | None = None,
    other: str | None = None,
) -> None:
    turn = ctx.state.turn
    assert turn is not None
    c = ctx.state.get(turn.combatant)
    assert c is not None
    assert c.place is not None
    if number is not None:
        _number(number, "number")
        if number >= c.place:
            raise _reject(
                "invalid_hold_number",
                "a held turn goes lower than {place}",
                "number",
                place=c.place,
            )
        floor = ctx.rules.delay_floor(c, ctx.opts)
        if floor is not None and number < floor:
            raise _reject(
                "below_delay_floor",
                "{name} cannot delay below {floor}",
                "number",
                name=c.name,
                floor=floor,
            )
    if (when is None) != (other is None):
        raise _reject(
            "invalid_value", "give both when and other, or neither", "other" if when else "when"
        )
    ctx.emit(ev.TurnHeld(turn.combatant, turn.round, number, ctx.state.serial + 1))
    if when is not None and other is not None:
        # Judged once the turn is held, as the moment will be; a refusal still changes
        # nothing, as the whole command is refused.
        _plan(ctx, turn.combatant, when, other)
    _expire_conditions(ctx)
    _advance(ctx, None)


def _hold(ctx: _Ctx, c: cmd.Hold) -> None:
    turn = _current_turn(ctx, c.turn)
    _no_window(ctx)
    if turn.acted:
        raise _reject("action_taken", "a turn can be held only before acting in it", "turn")
    if turn.kind == "floor":
        raise _reject("must_act", "at the delay floor a delayer acts or forfeits (R9)", "turn")
    _hold_now(ctx, c.number, c.when, c.other)


def _take_held(ctx: _Ctx, c: cmd.TakeHeldTurn) -> None:
    _in_rounds(ctx)
    if ctx.state.hold_of(c.combatant) is None:
        raise _reject("not_holding", "that combatant is not holding a turn", "combatant")
    _plan(ctx, c.combatant, c.when, c.other)


def _plan(ctx: _Ctx, holder: str, when: str, other: str) -> None:
    """Record when ``holder``'s held turn is taken: just before or just after ``other`` (R9).
    A moment that will not come while the hold lasts is refused, never kept to lapse."""
    if when not in ("before", "after"):
        raise _reject("invalid_value", "say 'before' or 'after'", "when")
    if other == holder:
        raise _reject("invalid_target", "a held turn goes before or after someone else", "other")
    target = _active(ctx, other, "other")
    if not _moment_comes(ctx, holder, when, other):
        if when == "before":
            raise _reject(
                "moment_passed",
                "too late to act just before {name}: that moment will not come while the hold "
                "lasts",
                "other",
                name=target.name,
            )
        raise _reject(
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


def _moment_comes(ctx: _Ctx, holder: str, when: str, other: str) -> bool:
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


def _break_after_cycle(ctx: _Ctx, a: str, b: str) -> None:
    """Two holders each waiting to go after the other (R9): marvel lets the first holder go
    first; in dnd3e the higher initiative bonus goes last. The one going first takes the very
    next moment between turns; the other follows it."""
    ha, hb = ctx.state.hold_of(a), ctx.state.hold_of(b)
    assert ha is not None
    assert hb is not None
    first, second = sorted(
        (ha, hb), key=lambda h: _prio(ctx, h), reverse=ctx.rules.mutual_after_higher_last
    )
    turn = ctx.state.turn
    nxt = _next_normal(ctx)
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


# -------------------------------------------------------------------------------------- actions


def _surprise_edges(ctx: _Ctx, actor: str, action: ActionSpec) -> tuple[str, ...]:
    if action.kind != "attack":
        return ()
    return tuple(
        f"surprised:{c.target}"
        for c in ctx.state.conditions
        if c.type == "surprised" and c.target in action.targets and actor in c.surprisers
    )


def _declare(ctx: _Ctx, c: cmd.DeclareAction) -> None:
    turn = _current_turn(ctx, c.turn)
    _no_window(ctx)
    action = _action_type(ctx, c.action)
    assert action.type is not None
    if turn.refocus or not ctx.rules.can_spend(turn.used, action.type):
        raise _reject(
            "action_unavailable",
            "no {action_type} action left this turn",
            "action.type",
            action_type=action.type,
        )
    round_no = turn.round
    ctx.emit(
        ev.ActionDeclared(
            turn.combatant, round_no, action, _surprise_edges(ctx, turn.combatant, action)
        )
    )
    event = "move" if action.type in ("movement", "move") else "action_declared"
    actor_tags = ctx.state.get(turn.combatant).tags  # type: ignore[union-attr]
    facts = TriggerFacts(
        event,
        turn.combatant,
        action.kind,
        action.targets,
        tuple(dict.fromkeys((*action.tags, *actor_tags))),
        action.zone,
        action.description,
    )
    if not _open_window(ctx, facts, action, (), only_if_matched=False):
        ctx.emit(ev.ActionResolved(turn.combatant, action))


def _refocus(ctx: _Ctx, c: cmd.Refocus) -> None:
    if not ctx.rules.refocus:
        raise _reject("not_in_ruleset", "{ruleset} has no refocus", ruleset=ctx.rules.name)
    _declare(ctx, cmd.DeclareAction(c.turn, ActionSpec("refocus", "full", "refocus")))


def _reserve(ctx: _Ctx, c: cmd.Reserve) -> None:
    turn = _current_turn(ctx, c.turn)
    _no_window(ctx)
    if c.reserved_type not in ctx.rules.reservable_types(ctx.opts):
        raise _reject(
            "invalid_action_type",
            "{ruleset} reserves only {action_types}",
            "reserved_type",
            ruleset=ctx.rules.name,
            action_types=", ".join(ctx.rules.reservable_types(ctx.opts)),
        )
    if turn.refocus or not ctx.rules.can_spend(turn.used, c.reserved_type):
        raise _reject(
            "action_unavailable",
            "no {action_type} action left",
            "reserved_type",
            action_type=c.reserved_type,
        )
    action = _action_type(ctx, c.action)
    assert action.type is not None
    if not ctx.rules.carries(c.reserved_type, action.type, ctx.opts):
        raise _reject(
            "action_type_mismatch",
            "a {action_type} action cannot carry out {kind!r} ({needed_action_type})",
            "action.kind",
            action_type=c.reserved_type,
            kind=action.kind,
            needed_action_type=action.type,
        )
    _text(c.trigger.text, "trigger.text")
    _predicate(c.trigger.predicate, "trigger.predicate")
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


# ---------------------------------------------------------------------------- reaction windows


def _predicate(p: Predicate | None, field_name: str) -> None:
    if p is not None:
        for name in ("events", "actors", "kinds", "targets", "tags", "zones"):
            _names(getattr(p, name), f"{field_name}.{name}")


def _perceives(ctx: _Ctx, combatant_id: str, actor_id: str | None) -> bool:
    """A hidden combatant's moves never reach a player (R16), so they cannot fire that
    player's reservations: the player could not even see the window to answer it."""
    actor = ctx.state.get(actor_id) if actor_id is not None else None
    c = ctx.state.get(combatant_id)
    return c is not None and perceives(c, actor)


def _can_claim(ctx: _Ctx, combatant_id: str) -> bool:
    c = ctx.state.get(combatant_id)
    return (
        c is not None
        and c.status == "active"
        and (c.reaction or not ctx.rules.claim_costs_reaction)
    )


def _open_window(
    ctx: _Ctx,
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
    _maybe_close(ctx)
    return True


def _maybe_close(ctx: _Ctx) -> None:
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
        _close(ctx, "answered")


def _open_window_for(ctx: _Ctx, window_id: str) -> Window:
    _in_rounds(ctx)
    w = ctx.state.window
    if w is None or w.id != window_id:
        raise _reject("unknown_window", "no open window {id!r}", "window", id=window_id)
    if w.status != "open":
        raise _reject("window_closed", "that window is closed; its claims are resolving", "window")
    return w


def _announce(ctx: _Ctx, c: cmd.AnnounceTrigger) -> None:
    _in_rounds(ctx)
    _no_window(ctx)
    _text(c.facts.event, "facts.event", limit=MAX_NAME)
    _text(c.facts.text, "facts.text", required=False)
    _names(c.facts.targets, "facts.targets")
    _names(c.facts.tags, "facts.tags")
    _names(c.offer, "offer")
    if c.facts.actor is not None:
        _combatant(ctx, c.facts.actor, "facts.actor")
    for i in c.offer:
        _active(ctx, i, "offer")
    _open_window(ctx, c.facts, None, c.offer, only_if_matched=False, announced=True)


def _claim(ctx: _Ctx, c: cmd.ClaimReaction) -> None:
    w = _open_window_for(ctx, c.window)
    combatant = _active(ctx, c.combatant)
    if c.combatant in {cl.combatant for cl in w.claims} | set(w.passes):
        raise _reject(
            "already_answered", "{name} has answered already", "combatant", name=combatant.name
        )
    reservation: Reservation | None = None
    if c.reservation is not None:
        reservation = next((r for r in ctx.state.reservations if r.id == c.reservation), None)
        if reservation is None or reservation.combatant != c.combatant:
            raise _reject(
                "unknown_reservation",
                "no reservation {id!r}",
                "reservation",
                id=str(c.reservation),
            )
    elif ctx.rules.reserve_mode == "ready":
        raise _reject("no_reservation", "only a readied action can be taken here", "reservation")
    elif c.action is None:
        raise _reject("invalid_value", "claim with a reservation or state the action", "action")
    if ctx.rules.claim_costs_reaction and not combatant.reaction:
        raise _reject(
            "no_reaction", "{name} has no reaction available", "combatant", name=combatant.name
        )
    action = reservation.action if reservation is not None else c.action
    assert action is not None
    if reservation is None:
        action = replace(_action_type(ctx, action), type=action.type or "reaction")
    supplied_by = None
    if c.faces is not None:
        if not ctx.rules.fresh_sequence_checks:
            raise _reject(
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
    _maybe_close(ctx)


def _pass(ctx: _Ctx, c: cmd.PassReaction) -> None:
    w = _open_window_for(ctx, c.window)
    combatant = _active(ctx, c.combatant)
    if c.combatant in {cl.combatant for cl in w.claims} | set(w.passes):
        raise _reject(
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
    _maybe_close(ctx)


def _close_window(ctx: _Ctx, c: cmd.CloseWindow) -> None:
    _open_window_for(ctx, c.window)
    _close(ctx, "narrator")


def _close(ctx: _Ctx, reason: str) -> None:
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
    claimants = [cl.combatant for cl in w.claims]
    checks: list[tuple[str, Check]] = []
    rolloffs: list[RollOff] = []
    if ctx.rules.fresh_sequence_checks and len(claimants) > 1:
        # R12: a fresh check for everyone involved, for this sequence only; no bonus round.
        units = []
        for cl in w.claims:
            i = cl.combatant
            c = ctx.state.get(i)
            assert c is not None
            check = ctx.rules.roll(c, ctx.dice, faces=cl.faces, supplied_by=cl.supplied_by)
            checks.append((i, check))
            units.append(Unit((i,), ctx.rules.tie_key(c, check.total, check.fantastic)))
        ordered, rolloffs = sort_units(units, ctx.dice, ctx.rules.rolloff_sides)
        sequence = tuple(u.members[0] for u in ordered)
    else:
        position = {i: n for n, i in enumerate(ctx.state.order)}
        sequence = tuple(sorted(claimants, key=lambda i: position.get(i, len(position))))
    ctx.emit(ev.SequenceOrdered(w.id, sequence, tuple(checks), tuple(rolloffs)))
    _next_reaction(ctx)


def _next_reaction(ctx: _Ctx) -> None:
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
        edges = _surprise_edges(ctx, current, claim.action)
        ctx.emit(ev.ReactionStarted(current, w.id, claim.action, edges))
        return


def _after_window(ctx: _Ctx, w: Window) -> None:
    """The trigger's own action goes ahead, or is cancelled if its actor is out (R12)."""
    actor = w.facts.actor
    if w.action is not None and actor is not None:
        if ctx.state.active(actor):
            ctx.emit(ev.ActionResolved(actor, w.action))
        else:
            ctx.emit(ev.ActionCancelled(actor, w.action, "actor_out"))
    if ctx.state.turn is None:
        _advance(ctx, None)


def _finish_reaction(ctx: _Ctx, c: cmd.FinishReaction) -> None:
    _in_rounds(ctx)
    w = ctx.state.window
    if w is None or w.id != c.window:
        raise _reject("unknown_window", "no window {id!r}", "window", id=c.window)
    if w.status != "resolving" or w.sequence[w.index] != c.combatant:
        raise _reject("not_reacting", "that combatant is not the one reacting now", "combatant")
    ctx.emit(ev.ReactionFinished(c.combatant, w.id))
    claim = next(cl for cl in w.claims if cl.combatant == c.combatant)
    if ctx.rules.readied_moves_initiative and claim.reserved_round is not None:
        _readier_moves(ctx, c.combatant, w, claim.reserved_round)
    _next_reaction(ctx)


def _readier_moves(ctx: _Ctx, readier: str, w: Window, reserved_round: int) -> None:
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


# ------------------------------------------------------------------------------------ conditions


def _expire_conditions(ctx: _Ctx) -> None:
    for c in ctx.state.conditions:
        if all(k.remaining == 0 for k in c.clocks):
            ctx.emit(ev.ConditionExpired(c.target, c.id, c.type))


def _apply_condition(ctx: _Ctx, c: cmd.ApplyCondition) -> None:
    kind = CONDITION_TYPES.get(c.type)
    if kind is None or (kind.rulesets and ctx.rules.name not in kind.rulesets):
        raise _reject(
            "unknown_condition_type", "no condition type {type!r} here", "type", type=c.type
        )
    _combatant(ctx, c.target, "target")
    if c.source is not None:
        _combatant(ctx, c.source, "source")
    anchor = c.anchor or c.source or c.target
    _combatant(ctx, anchor, "anchor")
    if not 1 <= c.rounds <= MAX_CONDITION_ROUNDS:
        raise _reject(
            "invalid_value", "between 1 and {limit}", "rounds", limit=MAX_CONDITION_ROUNDS
        )
    if c.boundary not in ("start", "end"):
        raise _reject("invalid_value", "'start' or 'end'", "boundary")
    _text(c.note, "note", required=False)
    turn = ctx.state.turn
    skip = c.boundary == "end" and turn is not None and turn.combatant == anchor
    condition = Condition(
        id=f"c{ctx.state.serial + 1}",
        type=c.type,
        target=c.target,
        source=c.source,
        clocks=(Clock(anchor, c.boundary, c.rounds, skip),),
        note=c.note,
    )
    ctx.emit(ev.ConditionApplied(condition))


def _remove_condition(ctx: _Ctx, c: cmd.RemoveCondition) -> None:
    found = next((k for k in ctx.state.conditions if k.id == c.condition), None)
    if found is None:
        raise _reject("unknown_condition", "no condition {id!r}", "condition", id=c.condition)
    ctx.emit(ev.ConditionRemoved(found.target, found.id, found.type, "removed"))


def _surprise(ctx: _Ctx, c: cmd.Surprise) -> None:
    if not ctx.rules.surprise:
        raise _reject("not_in_ruleset", "{ruleset} has no surprise", ruleset=ctx.rules.name)
    _in_rounds(ctx)
    _active(ctx, c.target, "target")
    _names(c.by, "by")
    if not c.by or len(set(c.by)) != len(c.by):
        raise _reject("invalid_value", "name who surprised the target, once each", "by")
    for i in c.by:
        _active(ctx, i, "by")
        if i == c.target:
            raise _reject("invalid_target", "a combatant cannot surprise itself", "by")
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


# ---------------------------------------------------------------------------------------- time


def _tick(ctx: _Ctx, c: cmd.Tick) -> None:
    w = ctx.state.window
    if w is not None and w.has_deadline and w.status == "open" and ctx.now >= w.deadline:
        _close(ctx, "deadline")
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
            _hold_now(ctx, None)
        else:
            _end_turn_now(ctx, "timer")


def _record_outcome(ctx: _Ctx, c: cmd.RecordOutcome) -> None:
    _text(c.kind, "kind", limit=MAX_NAME)
    _text(c.text, "text")
    if c.combatant is not None:
        _combatant(ctx, c.combatant)
    _figures(c.values, "values", MAX_NAME)
    if c.template or c.args:
        _outcome_template(c.template, c.args, c.text)
    ctx.emit(ev.OutcomeRecorded(c.kind, c.text, c.combatant, c.values, c.template, c.args))


def _figures(pairs: tuple[tuple[str, OptionValue], ...], field_name: str, limit: int) -> None:
    """Named plain values: short names, strings up to ``limit``, numbers in range."""
    if len(pairs) > MAX_ITEMS:
        raise _reject("invalid_value", "at most {limit} items", field_name, limit=MAX_ITEMS)
    for key, value in pairs:
        _text(key, field_name, limit=MAX_NAME)
        if isinstance(value, str):
            _text(value, field_name, required=False, limit=limit)
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not -MAX_NUMBER <= value <= MAX_NUMBER
        ):
            raise _reject("invalid_value", "{key}: out of range", field_name, key=key)


_FORMATTER = string.Formatter()
_DIGITS = re.compile(r"\d+")


def _outcome_template(template: str, args: tuple[tuple[str, OptionValue], ...], text: str) -> None:
    """``template`` filled in with ``args`` must be ``text``: a daemon tells the outcome from
    them in another language, and the English must say what the text says. Placeholders name
    an argument and nothing in it (no ``{a.b}``, ``{a[0]}``), and no format spec may ask for
    more than ``MAX_TEXT`` characters, so checking a hostile template costs little."""
    _text(template, "template")
    _figures(args, "args", MAX_TEXT)
    names = {key for key, _ in args}
    try:
        fields = [
            (name, spec) for _, name, spec, _ in _FORMATTER.parse(template) if name is not None
        ]
    except ValueError:
        raise _reject("invalid_value", "not a format template", "template") from None
    for name, spec in fields:
        if name not in names:
            raise _reject(
                "invalid_value", "placeholder {name!r} is not in args", "template", name=name
            )
        if "{" in (spec or "") or any(int(n) > MAX_TEXT for n in _DIGITS.findall(spec or "")):
            raise _reject(
                "invalid_value",
                "placeholder {name!r}: a format wider than {limit} characters",
                "template",
                name=name,
                limit=MAX_TEXT,
            )
    try:
        filled = template.format(**dict(args))
    except (KeyError, IndexError, AttributeError, ValueError, TypeError):
        raise _reject("invalid_value", "args do not fit the template", "template") from None
    if filled != text:
        raise _reject("invalid_value", "filled in with args, the template is not text", "template")


def _disable_plugin(ctx: _Ctx, c: cmd.DisablePlugin) -> None:
    _text(c.plugin, "plugin", limit=MAX_NAME)
    _text(c.reason, "reason", required=False)
    if c.plugin in ctx.state.disabled_plugins:
        raise _reject(
            "invalid_value", "plugin {plugin!r} is already disabled", "plugin", plugin=c.plugin
        )
    if len(ctx.state.disabled_plugins) >= MAX_DISABLED_PLUGINS:
        raise _reject(
            "too_many_plugins_disabled",
            "at most {limit} plugins may be disabled in one combat",
            "plugin",
            limit=MAX_DISABLED_PLUGINS,
        )
    ctx.emit(ev.PluginDisabled(c.plugin, c.reason))


def _enable_plugin(ctx: _Ctx, c: cmd.EnablePlugin) -> None:
    if c.plugin not in ctx.state.disabled_plugins:
        raise _reject(
            "invalid_value", "plugin {plugin!r} is not disabled", "plugin", plugin=c.plugin
        )
    ctx.emit(ev.PluginEnabled(c.plugin))


_HANDLERS: Mapping[type[cmd.Command], Callable[[_Ctx, Any], None]] = {
    cmd.AddCombatant: _add,
    cmd.RemoveCombatant: _remove,
    cmd.DefeatCombatant: _defeat,
    cmd.ReviveCombatant: _revive,
    cmd.RevealCombatant: _reveal,
    cmd.MarkSurprised: _mark_surprised,
    cmd.RollInitiative: _roll_initiative,
    cmd.OrderTies: _order_ties,
    cmd.ReorderGroup: _reorder_group,
    cmd.StartCombat: _start,
    cmd.EndTurn: _end_turn,
    cmd.DeclareAction: _declare,
    cmd.Hold: _hold,
    cmd.TakeHeldTurn: _take_held,
    cmd.Reserve: _reserve,
    cmd.Refocus: _refocus,
    cmd.AnnounceTrigger: _announce,
    cmd.ClaimReaction: _claim,
    cmd.PassReaction: _pass,
    cmd.CloseWindow: _close_window,
    cmd.FinishReaction: _finish_reaction,
    cmd.ApplyCondition: _apply_condition,
    cmd.RemoveCondition: _remove_condition,
    cmd.Surprise: _surprise,
    cmd.RecordOutcome: _record_outcome,
    cmd.DisablePlugin: _disable_plugin,
    cmd.EnablePlugin: _enable_plugin,
    cmd.Tick: _tick,
    cmd.Undo: _undo,
    cmd.EndCombat: _end_combat,
}
