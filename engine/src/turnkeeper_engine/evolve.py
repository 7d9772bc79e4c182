"""``evolve(state, event) -> state``: the only way a state changes. Pure and total over events.

Undo (R15) keeps no prior states but the events that made them. A state's ``History`` holds
the events of its last undoable commands (those that changed something) in stretches of
``STRETCH`` commands, each starting from a checkpoint: the whole state before its first
command. Undoing the last command folds the events of the commands before it in its stretch
into that checkpoint. The last stretch keeps its events as values; a full one is packed (its
plain form as deflated JSON, about 40 bytes a command where the values take 300) and opened
again only by an undo that reaches into it.

Why this and not the alternatives, measured on a marvel combat of 10 combatants after 500
commands (turns, actions, conditions; events decoded from the wire as a daemon has them), per
combat, tracemalloc over 40 combats: the 200 prior states of before took 223 KiB; reverse
deltas (each command's changed fields' old values) would keep the very parts those states
kept apart, saving only the 200 state records; the events as values take 86 KiB; packed
stretches with checkpoints every 25 commands take 36 KiB, of which the state itself is 8
(16 commands a stretch: 39 KiB, undo a third faster). The price is undo's: 30-50 µs before,
0.8 ms now (median; up to 3 ms when it opens a packed stretch), for a command a narrator
sends now and then. An ordinary command folds in 54 µs where it took 43 (a replay's events,
best of 15): packing costs 0.25 ms once every 25 commands. The snapshot of such a combat
went from 105 KB (13 ms to encode, 16 ms to decode) to 21 KB (1.5 and 2.6 ms).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from . import events as ev
from .model import (
    Clock,
    Condition,
    Done,
    History,
    Hold,
    Secret,
    State,
    Stretch,
    Turn,
    Window,
    maker,
    replace,
    replacer,
)
from .plain import from_plain, to_plain

_NOT_UNDOABLE = frozenset({"undo", "create_combat"})
"""Undo is itself never undone, and a combat's creation is where undo stops (R15)."""

UNDO_DEPTH = 200
"""Commands a narrator can undo in a row (R15); older ones are let go to bound memory."""

STRETCH = 25
"""Commands between two checkpoints of the undo history. An undo folds at most this many
commands' events into a checkpoint; fewer checkpoints would save memory but cost each undo
more (measurements in the module's docstring)."""

PACK_LEVEL = 1
"""zlib level of packed stretches: level 1 packs a stretch in about half the time of the
default for 10% more bytes, and a stretch is packed on the writer's path."""
PACK_MEMORY = 5
"""zlib ``memLevel`` of packed stretches: its default (8) sets up a 64 KiB hash table and
literal buffer for every stretch, some 5 KB of text, and that is over a quarter of deflating
one (204k instructions, 147k with 5). A stretch of play packs to the same bytes, text of
hundreds of KB to 1-3% more; the stream is zlib's as before (``zlib.decompress`` opens it)."""

_NO_HISTORY = History()

# The undo history's values are made on every event: made without ``__init__`` (``maker``),
# and the state's replacements without ``replace``'s look-up of the function for its fields.
_done = maker(Done)
_stretch = maker(Stretch)
_history = maker(History)
_with_command = replacer(State, "undo", "last_command")
_checkpoint = replacer(State, "undo", "seq", "secrets", "measured")
# A condition applied or gone, the commonest events of play after a turn's: as above.
_with_condition = replacer(State, "conditions", "serial")
_with_conditions = replacer(State, "conditions")
_with_log = replacer(State, "seq", "secrets")


def _set(state: State, combatant_id: str, **changes: Any) -> State:
    return replace(
        state,
        combatants=tuple(
            replace(c, **changes) if c.id == combatant_id else c for c in state.combatants
        ),
    )


def _window(state: State, **changes: Any) -> State:
    assert state.window is not None, "window event without an open window"
    return replace(state, window=replace(state.window, **changes))


def tick_clocks(state: State, combatant_id: str, boundary: str) -> State:
    """Count a turn boundary of ``combatant_id`` down on every condition anchored to it."""

    def tick(clock: Clock) -> Clock:
        if clock.anchor != combatant_id or clock.boundary != boundary or clock.remaining == 0:
            return clock
        if clock.skip:
            return replace(clock, skip=False)
        return replace(clock, remaining=clock.remaining - 1)

    def condition(c: Condition) -> Condition:
        return replace(c, clocks=tuple(tick(k) for k in c.clocks))

    return replace(state, conditions=tuple(condition(c) for c in state.conditions))


def _reorder_members(ids: tuple[str, ...], members: tuple[str, ...]) -> tuple[str, ...]:
    """Put ``members`` in the slots they already occupy in ``ids``, in the given sequence."""
    slots = iter(members)
    return tuple(next(slots) if i in members else i for i in ids)


def _reorder_group(state: State, e: ev.GroupReordered) -> State:
    by_id = {c.id: c for c in state.combatants}
    ids = _reorder_members(tuple(by_id), e.combatants)
    return replace(
        state,
        combatants=tuple(by_id[i] for i in ids),
        order=_reorder_members(state.order, e.combatants) if state.order else state.order,
    )


def _turn_started(state: State, e: ev.TurnStarted) -> State:
    # A held turn taken later in the round is the round's turn resuming: clocks that count the
    # starts of its turns count the round once (R13).
    first_start = e.combatant not in state.reached
    state = replace(
        state,
        turn=Turn(
            e.round,
            e.combatant,
            e.kind,
            e.at,
            deadline=e.deadline,
            warn_at=e.warn_at,
            number=state.turns + 1 if e.number is None else e.number,
        ),
        turns=state.turns + 1,
        reached=state.reached | {e.combatant},
        holds=tuple(h for h in state.holds if h.combatant != e.combatant),
    )
    return tick_clocks(state, e.combatant, "start") if first_start else state


def _turn_timer_set(state: State, e: ev.TurnTimerSet) -> State:
    # Options are kept as ``check_options`` leaves them: sorted by name, times as floats.
    limit = None if e.seconds is None else float(e.seconds)
    options = tuple(sorted({**dict(state.options), "turn_time_limit": limit}.items()))
    turn = state.turn
    if e.seconds is None and turn is not None and turn.deadline is not None:
        # Turned off: the running turn's timer stops too (a new length waits for the next turn).
        turn = replace(turn, deadline=None, warn_at=None)
    return replace(state, options=options, turn=turn)


def _turn_ended(state: State, e: ev.TurnEnded) -> State:
    return tick_clocks(replace(state, turn=None), e.combatant, "end")


def _turn_held(state: State, e: ev.TurnHeld) -> State:
    hold = Hold(e.combatant, e.ordinal, e.round, e.number, "at" if e.number is not None else None)
    return replace(state, turn=None, holds=(*state.holds, hold), serial=state.serial + 1)


def _hold_planned(state: State, e: ev.HoldPlanned) -> State:
    def plan(h: Hold) -> Hold:
        if h.combatant != e.combatant:
            return h
        # Only a reset recorded before plans were told as ``at`` (``when: "open"``, see
        # ``plain.event_from_plain``) has no plan for a holder that named a number.
        plan = "at" if e.plan is None and h.number is not None else e.plan
        return replace(h, plan=plan, target=e.target)

    return replace(state, holds=tuple(plan(h) for h in state.holds))


def _without_hold(state: State, combatant_id: str) -> State:
    return replace(state, holds=tuple(h for h in state.holds if h.combatant != combatant_id))


def _without_reservation(state: State, reservation_id: str) -> State:
    return replace(
        state, reservations=tuple(r for r in state.reservations if r.id != reservation_id)
    )


def _used(state: State, action_type: str | None) -> State:
    if state.turn is None or action_type is None:
        return state
    return replace(state, turn=replace(state.turn, used=(*state.turn.used, action_type)))


def _action_declared(state: State, e: ev.ActionDeclared) -> State:
    # Actions taken while reacting spend the reaction, not the interrupted turn's budget.
    if state.turn is None or state.turn.combatant != e.combatant:
        return state
    state = _used(state, e.action.type)
    if e.action.kind == "refocus":
        state = replace(state, turn=replace(_t(state), refocus=True))
    return state


def _reaction_cancelled(state: State, e: ev.ReactionCancelled) -> State:
    w = state.window
    assert w is not None
    if e.combatant not in w.sequence:
        # Cancelled before the window closed: the claim itself goes.
        return _window(state, claims=tuple(c for c in w.claims if c.combatant != e.combatant))
    position = w.sequence.index(e.combatant)
    sequence = tuple(c for c in w.sequence if c != e.combatant)
    return _window(state, sequence=sequence, index=w.index - (position < w.index))


def _window_closed(state: State, e: ev.WindowClosed) -> State:
    w = state.window
    assert w is not None
    return replace(state, window=replace(w, status="resolving") if w.claims else None)


def _condition_gone(state: State, condition_id: str) -> State:
    return _with_conditions(state, tuple(c for c in state.conditions if c.id != condition_id))


def _within_reach(stretches: tuple[Stretch, ...], reach: int) -> tuple[Stretch, ...]:
    """The last stretches that hold the last ``reach`` commands; older ones go."""
    if reach <= 0:
        return ()
    held = 0
    # From the last stretch back, ``Stretch.size`` of each without its call, only as far as
    # the ``reach``: none but the last of a young combat's history (its first ``STRETCH``
    # commands), and no list of every stretch's size made for each command.
    for k in range(1, len(stretches)):
        last = stretches[-k]
        held += last.count if last.packed else len(last.done)
        if held >= reach:
            return stretches[-k:]
    return stretches


_PACKER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
"""The compact JSON of packed stretches, made once (``json.dumps`` with options makes one per
call). Plain data is a tree: the encoder need not look for cycles (a fifth of its time)."""


def _packed(stretch: Stretch) -> Stretch:
    """``stretch`` with its commands packed: their plain form as compact JSON, deflated, in
    base64 (a string, so a snapshot stores it as it is; base85 is 6% shorter but written in
    Python, and this runs on the writer's path). About 40 bytes a command where the values
    take 300 (see the module's docstring)."""
    if stretch.packed or not stretch.done:
        return stretch
    text = _PACKER.encode(to_plain(stretch.done))
    packer = zlib.compressobj(PACK_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, PACK_MEMORY)
    deflated = packer.compress(text.encode()) + packer.flush()
    packed = base64.b64encode(deflated).decode("ascii")
    return Stretch(stretch.start, packed=packed, count=len(stretch.done))


def _opened(stretch: Stretch) -> Stretch:
    """``stretch`` with its commands as values again."""
    if not stretch.packed:
        return stretch
    plain = json.loads(zlib.decompress(base64.b64decode(stretch.packed)))
    return Stretch(stretch.start, from_plain(tuple[Done, ...], plain))


def _recorded(state: State, name: str) -> State:
    """An undoable command begins: it joins the last stretch, or starts a new one from the
    state as it is (its checkpoint) when that stretch is full, and the full one is packed."""
    history = state.undo
    reach = history.reach + 1
    if reach > UNDO_DEPTH:
        reach = UNDO_DEPTH
    stretches = history.stretches
    done = _done(name, ())
    last = stretches[-1] if stretches else None
    # ``Stretch.size``, without its call.
    if last is not None and (last.count if last.packed else len(last.done)) < STRETCH:
        if last.packed:
            last = _opened(last)
        stretches = (*stretches[:-1], _stretch(last.start, (*last.done, done), "", 0))
    else:
        # The log's fields are the current state's, never a checkpoint's: undo keeps them; nor
        # is the size memo, which would hold values the checkpoint has not.
        start = _checkpoint(state, _NO_HISTORY, 0, (), None)
        if stretches:
            stretches = (*stretches[:-1], _packed(stretches[-1]))
        stretches = (*stretches, _stretch(start, (done,), "", 0))
    undo = _history(_within_reach(stretches, reach), reach)
    return _with_command(state, undo, name)


def _joined(history: History, event: ev.Event, after: State) -> History:
    """``history`` with ``event``, which made ``after``, added to its last command's events.
    An event is kept in today's words, so that one history comes of one game whichever
    daemon recorded its log: a ``turn_started`` recorded before it named the turn's number
    is kept with the number it gave the turn."""
    if type(event) is ev.TurnStarted and event.number is None and after.turn is not None:
        event = replace(event, number=after.turn.number)
    stretches = history.stretches
    last = stretches[-1]
    done = last.done[-1]
    joined = _done(done.command, (*done.events, event))
    stretch = _stretch(last.start, (*last.done[:-1], joined), "", 0)
    return _history((*stretches[:-1], stretch), history.reach)


def _replayed(start: State, done: tuple[Done, ...]) -> State:
    """``start`` with the events of the commands ``done`` folded in, as they were recorded."""
    state = start
    for command in done:
        for event in command.events:
            state = _FOLD[type(event)](state, event)
    return replace(state, last_command=done[-1].command) if done else state


def _undo(state: State) -> State:
    """The state before the last undoable command, its history without that command."""
    stretches = state.undo.stretches
    if not stretches[-1].size:  # begun at an older daemon's snapshot (``plain``), still empty
        stretches = stretches[:-1]
    last = _opened(stretches[-1])
    kept = last.done[:-1]
    if kept:
        previous = _replayed(last.start, kept)
        stretches = (*stretches[:-1], Stretch(last.start, kept))
    else:
        previous = last.start
        stretches = stretches[:-1]
    reach = state.undo.reach - 1
    stretches = _within_reach(stretches, reach)
    if stretches:
        # The last stretch is always open, so that a history is one value whatever undos it
        # went through (states compare equal with it, R15) and the next undo is a fold.
        stretches = (*stretches[:-1], _opened(stretches[-1]))
    return replace(previous, undo=History(stretches, reach))


_FOLD: dict[type[ev.Event], Callable[[State, Any], State]] = {
    ev.CombatCreated: lambda s, e: replace(
        s, combat_id=e.combat_id, ruleset=e.ruleset, options=e.options, phase="setup"
    ),
    ev.CombatantAdded: lambda s, e: replace(s, combatants=(*s.combatants, e.combatant)),
    ev.CombatantRevealed: lambda s, e: _set(s, e.combatant.id, hidden=False),
    ev.CombatantRemoved: lambda s, e: replace(
        _set(s, e.combatant, status="removed"), order=tuple(i for i in s.order if i != e.combatant)
    ),
    ev.CombatantDefeated: lambda s, e: _set(s, e.combatant, status="defeated"),
    ev.CombatantRevived: lambda s, e: _set(s, e.combatant, status="active"),
    ev.SurpriseMarked: lambda s, e: _set(s, e.combatant, surprised=True),
    ev.InitiativeRolled: lambda s, e: replace(
        s,
        phase="initiative" if s.phase == "setup" else s.phase,
        combatants=tuple(
            replace(c, check=e.check, place=e.check.total) if c.id in e.members else c
            for c in s.combatants
        ),
    ),
    ev.TiesOrdered: lambda s, e: replace(
        s, tie_order=(*(i for i in s.tie_order if i not in e.combatants), *e.combatants)
    ),
    ev.GroupReordered: _reorder_group,
    ev.CombatStarted: lambda s, e: replace(
        s, order=e.order, bonus=e.bonus, phase="bonus_round" if e.bonus else "rounds"
    ),
    ev.CombatantSlotted: lambda s, e: replace(
        s, order=e.order, reached=s.reached | {e.combatant} if e.passed else s.reached
    ),
    ev.RoundStarted: lambda s, e: replace(
        s,
        round=e.round,
        reached=frozenset(),
        phase="bonus_round" if e.round == 0 else "rounds",
    ),
    ev.RoundEnded: lambda s, e: s,
    ev.TurnStarted: _turn_started,
    ev.TurnEnded: _turn_ended,
    ev.TurnHeld: _turn_held,
    ev.HoldPlanned: _hold_planned,
    ev.HoldLapsed: lambda s, e: _without_hold(s, e.combatant),
    ev.HoldCancelled: lambda s, e: _without_hold(s, e.combatant),
    ev.DelayForfeited: lambda s, e: s,
    ev.PlaceChanged: lambda s, e: replace(_set(s, e.combatant, place=e.place), order=e.order),
    ev.TurnForgone: lambda s, e: replace(s, reached=s.reached | {e.combatant}),
    ev.ReactionRefreshed: lambda s, e: _set(s, e.combatant, reaction=True),
    ev.ReactionSpent: lambda s, e: _set(s, e.combatant, reaction=False),
    ev.ActionDeclared: _action_declared,
    ev.ActionResolved: lambda s, e: s,
    ev.ActionCancelled: lambda s, e: s,
    ev.ActionReserved: lambda s, e: replace(
        _used(s, e.reservation.reserved_type),
        reservations=(*s.reservations, e.reservation),
        serial=s.serial + 1,
    ),
    ev.ReservationExpired: lambda s, e: _without_reservation(s, e.reservation),
    ev.ReservationUsed: lambda s, e: _without_reservation(s, e.reservation),
    ev.ReservationCancelled: lambda s, e: _without_reservation(s, e.reservation),
    ev.WindowOpened: lambda s, e: replace(s, window=e.window, serial=s.serial + 1),
    ev.ReactionClaimed: lambda s, e: _window(s, claims=(*_w(s).claims, e.claim)),
    ev.ReactionPassed: lambda s, e: _window(s, passes=(*_w(s).passes, e.combatant)),
    ev.WindowClosed: _window_closed,
    ev.SequenceOrdered: lambda s, e: _window(s, sequence=e.sequence, index=0),
    ev.ReactionStarted: lambda s, e: s,
    ev.ReactionFinished: lambda s, e: _window(s, index=_w(s).index + 1),
    ev.ReactionCancelled: _reaction_cancelled,
    ev.SequenceEnded: lambda s, e: replace(s, window=None),
    ev.ConditionApplied: lambda s, e: _with_condition(
        s, (*(c for c in s.conditions if c.id != e.condition.id), e.condition), s.serial + 1
    ),
    ev.ConditionExpired: lambda s, e: _condition_gone(s, e.condition),
    ev.ConditionRemoved: lambda s, e: _condition_gone(s, e.condition),
    ev.TurnTimerWarning: lambda s, e: replace(s, turn=replace(_t(s), warned=True)),
    ev.TurnTimerExpired: lambda s, e: s,
    ev.TurnTimerSet: _turn_timer_set,
    ev.OutcomeRecorded: lambda s, e: s,
    ev.PluginDisabled: lambda s, e: replace(
        s, disabled_plugins=(*(p for p in s.disabled_plugins if p != e.plugin), e.plugin)
    ),
    ev.PluginEnabled: lambda s, e: replace(
        s, disabled_plugins=tuple(p for p in s.disabled_plugins if p != e.plugin)
    ),
    ev.CombatEnded: lambda s, e: replace(s, phase="ended", turn=None, window=None),
}


def _w(state: State) -> Window:
    assert state.window is not None
    return state.window


def _t(state: State) -> Turn:
    assert state.turn is not None
    return state.turn


_TELLS_SECRETS = frozenset((ev.CombatantRevealed, ev.CombatantAdded, ev.CommandUndone))
"""The events that begin or end a hidden stretch (``_secrets``)."""


def _secrets(state: State, after: State, event: ev.Event, seq: int) -> tuple[Secret, ...]:
    """The record of hidden stretches once ``event`` (number ``seq``) is folded into ``after``:
    a hidden combatant's stretch begins with its addition and ends with its reveal, or when an
    undo takes it away or makes it visible; an undo that brings one back hidden begins another."""
    secrets = state.secrets
    if isinstance(event, ev.CombatantRevealed):
        gone = {event.combatant.id}
    elif isinstance(event, ev.CombatantAdded):
        c = event.combatant
        return (*secrets, Secret(c.id, c.controller, seq)) if c.hidden else secrets
    elif isinstance(event, ev.CommandUndone):
        hidden = {c.id: c.controller for c in after.combatants if c.hidden}
        gone = {s.combatant for s in secrets if s.until is None and s.combatant not in hidden}
        still = {s.combatant for s in secrets if s.until is None} - gone
        fresh = tuple(Secret(i, who, seq) for i, who in hidden.items() if i not in still)
        secrets = (*secrets, *fresh)
    else:
        return secrets
    return tuple(
        replace(s, until=seq) if s.until is None and s.combatant in gone else s for s in secrets
    )


def evolve(state: State, event: ev.Event) -> State:
    """Fold one event into the state. Never fails on events ``decide`` produced."""
    joins = False
    # ``type(…) is``, not ``isinstance``: an event's class is its kind (``_FOLD`` is keyed by
    # it), and an ``isinstance`` that fails looks up the event's ``__class__`` besides, ~200
    # instructions, for nearly every event folded.
    if type(event) is ev.CommandRecorded:
        after = state if event.command in _NOT_UNDOABLE else _recorded(state, event.command)
    elif type(event) is ev.CommandUndone:
        after = _undo(state)
    else:
        after = _FOLD[type(event)](state, event)
        # Part of the last undoable command (``decide`` begins every batch with its
        # ``CommandRecorded``; only a combat's creation comes before any).
        joins = after is not state and bool(state.undo.stretches)
    seq = state.seq + 1
    secrets = _secrets(state, after, event, seq) if type(event) in _TELLS_SECRETS else state.secrets
    if after is state:
        return _with_log(state, seq, secrets)
    # ``after`` was made just now for this event and nothing else holds it yet: the log's
    # fields are set on it rather than the whole state copied once more (replay speed).
    object.__setattr__(after, "seq", seq)
    if after.secrets is not secrets:  # most events leave them, and ``after`` has them
        object.__setattr__(after, "secrets", secrets)
    if joins:
        object.__setattr__(after, "undo", _joined(state.undo, event, after))
    return after


def fold(events: Iterable[ev.Event], state: State | None = None) -> State:
    """Replay events from an empty state (or from ``state``)."""
    result = state if state is not None else State()
    for event in events:
        result = evolve(result, event)
    return result
