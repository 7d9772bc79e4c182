"""Input validators and lookups that refuse: each raises a refusal (``reject``) or returns what
it checked. They read the state and never change it."""

from __future__ import annotations

import operator
import re
import string
import typing
from dataclasses import fields, replace
from itertools import compress
from operator import attrgetter
from typing import Any

from ..model import ActionSpec, Combatant, Measure, OptionValue, Predicate, State, Turn, maker
from ..plain import encoded_size, header_size, keys_size
from ..rulesets import Ruleset
from ..views import View
from .context import (
    MAX_ITEMS,
    MAX_NAME,
    MAX_NUMBER,
    MAX_SECONDS,
    MAX_TEXT,
    MAX_VIEW_BYTES,
    MIN_TURN_SECONDS,
    PLAY_BYTES,
    PLAY_FIXED,
    PLAY_IDS,
    PLAY_PLUGINS,
    Ctx,
    reject,
)


def check_size(ctx: Ctx) -> None:
    """Refuse a command that grows the combat past ``MAX_VIEW_BYTES`` with room for play."""
    state = ctx.state
    measured = measure(state)
    room = PLAY_BYTES + PLAY_IDS * measured.longest
    size = measured.size + PLAY_FIXED + PLAY_PLUGINS + len(state.combatants) * room
    if size > MAX_VIEW_BYTES:
        raise reject(
            "combat_too_large",
            "the combat would grow to {size} bytes with room for play, over its limit of {limit}",
            size=size,
            limit=MAX_VIEW_BYTES,
        )


_VIEW_FIELDS = tuple(f.name for f in fields(View))
"""The fields of a view, each a field of the state: the narrator's view is the state's."""
_view_values = attrgetter(*_VIEW_FIELDS)
_VIEW_KEYS = keys_size(View)
_COMBATANTS = _VIEW_FIELDS.index("combatants")
_INDEXES = tuple(range(len(_VIEW_FIELDS)))
_measure = maker(Measure)  # made on every content-adding command
_UNMEASURED = object()
"""What a state never measured was measured with: no value is it."""
_NOTHING_MEASURED = Measure(
    (_UNMEASURED,) * len(_VIEW_FIELDS), (0,) * len(_VIEW_FIELDS), (None,) * len(_VIEW_FIELDS), 0, 0
)


def measure(state: State) -> Measure:
    """The encoded size of ``view(state, NARRATOR)``, exactly, measuring only the values that
    are not those measured last (``State.measured``, carried from state to state by the
    fold): a size check ran on every content-adding command and walked the whole combat. A
    value still held (``is``: values are immutable) has the size it had, and so has an item
    of a tuple that was in the tuple measured (the memo holds that tuple, so the ids compared
    are of live objects). The measure is left on ``state`` for the next check."""
    values: tuple[object, ...] = _view_values(state)
    measured = state.measured
    if measured is None:
        measured = _NOTHING_MEASURED
        changed: list[int] = list(_INDEXES)
    else:
        # The fields not held as measured, found in one pass in C: most commands change one
        # or two of the view's fields, and only they are gone through.
        changed = list(compress(_INDEXES, map(operator.is_not, values, measured.values)))
        if not changed:
            return measured
    sizes = list(measured.sizes)
    items = list(measured.items)
    longest = measured.longest
    # Each changed tuple was a tuple when measured: its items were measured (``items``).
    held: tuple[Any, ...] = measured.values
    for i in changed:
        value = values[i]
        if type(value) is tuple:
            old = items[i]
            if old is None:
                each = tuple(map(encoded_size, value))
            else:
                was = held[i]
                if len(value) >= len(old) and all(map(operator.is_, was, value)):
                    # Items added at the end (a condition applied, a combatant added): only
                    # they are measured, the rest compared in one pass, not looked up each.
                    each = old + tuple(map(encoded_size, value[len(old) :]))
                else:
                    # A list comprehension, not a generator resumed for each item.
                    known = dict(zip(map(id, was), old, strict=True))
                    each = tuple(
                        [known[id(v)] if id(v) in known else encoded_size(v) for v in value]
                    )
            sizes[i], items[i] = header_size(len(each)) + sum(each), each
        else:
            sizes[i], items[i] = encoded_size(value), None
        if i == _COMBATANTS:
            combatants = typing.cast(tuple[Combatant, ...], value)
            longest = max((encoded_size(c.id) for c in combatants), default=0)
    made = _measure(values, tuple(sizes), tuple(items), longest, _VIEW_KEYS + sum(sizes))
    # A memo, not a change of the state: frozen values are set this way only here and in the
    # fold's log fields (``evolve``).
    object.__setattr__(state, "measured", made)
    return made


def find_combatant(ctx: Ctx, combatant_id: str, field_name: str = "combatant") -> Combatant:
    """The combatant ``combatant_id`` names, or a refusal if there is none the actor may see."""
    c = ctx.state.get(combatant_id)
    # To anyone who may not see a hidden combatant, it does not exist (R16).
    unseen = (
        c is not None
        and c.hidden
        and ctx.actor.role != "narrator"
        and (c.controller is None or c.controller != ctx.actor.user)
    )
    if c is None or c.status == "removed" or unseen:
        raise reject("unknown_combatant", "no combatant {id!r}", field_name, id=combatant_id)
    return c


def find_active(ctx: Ctx, combatant_id: str, field_name: str = "combatant") -> Combatant:
    """As ``find_combatant``, but refused if the combatant is defeated."""
    c = find_combatant(ctx, combatant_id, field_name)
    if c.status != "active":  # a removed one is refused above: this one is defeated
        raise reject("combatant_inactive", "{name} is defeated", field_name, name=c.name)
    return c


def check_text(
    value: str, field_name: str, *, required: bool = True, limit: int = MAX_TEXT
) -> None:
    """Refuse text that is empty (when ``required``) or longer than ``limit``."""
    if required and not value.strip():
        raise reject("invalid_value", "must not be empty", field_name)
    if len(value) > limit:
        raise reject("invalid_value", "longer than {limit} characters", field_name, limit=limit)


def check_names(values: tuple[str, ...], field_name: str) -> None:
    """A short list of short names: tags, zones, targets, predicate terms."""
    if len(values) > MAX_ITEMS:
        raise reject("invalid_value", "at most {limit} items", field_name, limit=MAX_ITEMS)
    for value in values:
        check_text(value, field_name, limit=MAX_NAME)


def check_number(value: int, field_name: str) -> None:
    """Refuse a number outside ``±MAX_NUMBER``."""
    if not -MAX_NUMBER <= value <= MAX_NUMBER:
        raise reject("invalid_value", "between -{limit} and {limit}", field_name, limit=MAX_NUMBER)


def require_in_rounds(ctx: Ctx) -> None:
    """Refuse unless the combat is in its rounds (the bonus round included)."""
    if ctx.state.phase not in ("bonus_round", "rounds"):
        raise reject("wrong_phase", "not possible in phase {phase}", phase=ctx.state.phase)


def require_current_turn(ctx: Ctx, ref: Any) -> Turn:
    """The turn in progress, refused unless ``ref`` names it."""
    require_in_rounds(ctx)
    turn = ctx.state.turn
    if turn is None or not turn.named_by(ref):
        raise reject("stale_turn", "that turn is not the current turn", "turn")
    return turn


def require_no_window(ctx: Ctx) -> None:
    """Refuse while a reaction window is open."""
    if ctx.state.window is not None:
        raise reject("window_open", "a reaction window is open; resolve it first", "window")


def check_action(ctx: Ctx, action: ActionSpec, field_name: str = "action") -> ActionSpec:
    """Resolve an action's type from the catalogue (R6) or its own statement."""
    check_text(action.kind, f"{field_name}.kind", limit=MAX_NAME)
    check_text(action.description, f"{field_name}.description", required=False)
    check_names(action.targets, f"{field_name}.targets")
    check_names(action.tags, f"{field_name}.tags")
    if action.zone is not None:
        check_text(action.zone, f"{field_name}.zone", limit=MAX_NAME)
    for target in action.targets:
        find_combatant(ctx, target, f"{field_name}.targets")
    known = ctx.rules.action_type(action.kind)
    if known is None and action.type is None:
        raise reject(
            "unknown_action_kind",
            "{kind!r} is not in the {ruleset} catalogue: state its action type",
            f"{field_name}.kind",
            kind=action.kind,
            ruleset=ctx.rules.name,
        )
    if known is not None and action.type is not None and action.type != known:
        raise reject(
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
        raise reject(
            "invalid_action_type",
            "{type!r} is not an action type of {ruleset}",
            f"{field_name}.type",
            type=resolved,
            ruleset=ctx.rules.name,
        )
    return replace(action, type=resolved)


def check_options(
    rules: Ruleset, given: tuple[tuple[str, OptionValue], ...]
) -> tuple[tuple[str, OptionValue], ...]:
    """The ruleset's options with ``given`` applied over the defaults, each checked."""
    spec = rules.all_options()
    values: dict[str, OptionValue] = {name: default for name, (default, _) in spec.items()}
    for name, value in given:
        if name not in spec:
            raise reject(
                "unknown_option",
                "{ruleset} has no option {option!r}",
                f"options.{name}",
                ruleset=rules.name,
                option=name,
            )
        allowed = spec[name][1]
        if allowed is float:
            _check_seconds(name, value)
            ok = True
        elif isinstance(allowed, tuple):
            ok = value in allowed
        else:
            ok = isinstance(value, allowed)
        if not ok:
            raise reject(
                "invalid_option",
                "{value} is not valid for {option}",
                f"options.{name}",
                value=repr(value),  # the option's value may be None or a bool: not an Arg
                option=name,
            )
        values[name] = float(value) if isinstance(value, int) and allowed is float else value
    return tuple(sorted(values.items()))


def _check_seconds(name: str, value: OptionValue) -> None:
    """A time option: nil, or seconds up to ``MAX_SECONDS``; a turn limit no less than
    ``MIN_TURN_SECONDS``."""
    low = MIN_TURN_SECONDS if name == "turn_time_limit" else 0.0
    if value is None or (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and low <= value <= MAX_SECONDS
    ):
        return
    raise reject(
        "invalid_option",
        "{option}: nil, or from {low} to {high} seconds",
        f"options.{name}",
        option=name,
        low=low,
        high=MAX_SECONDS,
    )


def check_predicate(p: Predicate | None, field_name: str) -> None:
    """Refuse a trigger predicate whose lists are too long or hold bad names."""
    if p is not None:
        for name in ("events", "actors", "kinds", "targets", "tags", "zones"):
            check_names(getattr(p, name), f"{field_name}.{name}")


def check_figures(pairs: tuple[tuple[str, OptionValue], ...], field_name: str, limit: int) -> None:
    """Named plain values: short names, strings up to ``limit``, numbers in range."""
    if len(pairs) > MAX_ITEMS:
        raise reject("invalid_value", "at most {limit} items", field_name, limit=MAX_ITEMS)
    for key, value in pairs:
        check_text(key, field_name, limit=MAX_NAME)
        if isinstance(value, str):
            check_text(value, field_name, required=False, limit=limit)
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not -MAX_NUMBER <= value <= MAX_NUMBER
        ):
            raise reject("invalid_value", "{key}: out of range", field_name, key=key)


_FORMATTER = string.Formatter()


_DIGITS = re.compile(r"\d+")


def check_outcome_template(
    template: str, args: tuple[tuple[str, OptionValue], ...], text: str
) -> None:
    """``template`` filled in with ``args`` must be ``text``: a daemon tells the outcome from
    them in another language, and the English must say what the text says. Placeholders name
    an argument and nothing in it (no ``{a.b}``, ``{a[0]}``), and no format spec may ask for
    more than ``MAX_TEXT`` characters, so checking a hostile template costs little."""
    check_text(template, "template")
    check_figures(args, "args", MAX_TEXT)
    names = {key for key, _ in args}
    try:
        fields = [
            (name, spec) for _, name, spec, _ in _FORMATTER.parse(template) if name is not None
        ]
    except ValueError:
        raise reject("invalid_value", "not a format template", "template") from None
    for name, spec in fields:
        if name not in names:
            raise reject(
                "invalid_value", "placeholder {name!r} is not in args", "template", name=name
            )
        if "{" in (spec or "") or any(int(n) > MAX_TEXT for n in _DIGITS.findall(spec or "")):
            raise reject(
                "invalid_value",
                "placeholder {name!r}: a format wider than {limit} characters",
                "template",
                name=name,
                limit=MAX_TEXT,
            )
    try:
        filled = template.format(**dict(args))
    except (KeyError, IndexError, AttributeError, ValueError, TypeError):
        raise reject("invalid_value", "args do not fit the template", "template") from None
    if filled != text:
        raise reject("invalid_value", "filled in with args, the template is not text", "template")
