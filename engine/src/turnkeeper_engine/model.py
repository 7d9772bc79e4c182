"""The immutable values the engine works with: combatants, checks, turns, holds, reservations.

Everything here is a frozen dataclass made of plain values (str, int, float, bool, None, tuples
of those, and other values from this module), so a state can be compared, copied, undone and
serialised exactly. ``Event`` is the base of the events (``events``): it lives here because a
state keeps the events of the commands it can undo (``History``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from types import MemberDescriptorType
from typing import Any, ClassVar, Literal, TypeVar, cast

Phase = Literal["none", "setup", "initiative", "bonus_round", "rounds", "ended"]
Status = Literal["active", "defeated", "removed"]
Role = Literal["narrator", "player", "observer"]
Boundary = Literal["start", "end"]
TurnKind = Literal["normal", "held", "floor"]
OptionValue = str | int | float | bool | None
T = TypeVar("T")

_REPLACERS: dict[tuple[Any, ...], Callable[..., Any]] = {}
"""``replace`` of each class and fields changed (``_replacer``)."""
_DRAFTS: dict[type, type] = {}


def _draft(cls: type) -> type:
    """A class of the layout of ``cls`` (its bases, its slots) that is not frozen: a new value
    is made as a draft, its fields set as plain slot attributes (an instruction each, where a
    frozen value's field is set by a call through ``object.__setattr__``, which packs its
    arguments in a tuple), and then given its class. Python allows that ``__class__``
    assignment between classes of one layout; it is tried once here, and a class it does not
    fit (one without slots) raises ``TypeError``."""
    known = _DRAFTS.get(cls)
    if known is not None:
        return known
    names = [f.name for f in fields(cls)]
    # The functions made with a draft name their own locals with an underscore, so that no
    # field (a model field is a public name) can shadow them.
    if any(n.startswith("_") for n in names):
        raise TypeError(f"{cls.__name__}: only records with public field names are drafted")
    slots = cls.__dict__.get("__slots__")
    if slots is None or any(
        not isinstance(
            next((c.__dict__[n] for c in cls.__mro__ if n in c.__dict__), None),
            MemberDescriptorType,
        )
        for n in names
    ):
        raise TypeError(f"{cls.__name__}: only records with slots are drafted")
    draft = type(
        f"{cls.__name__}Draft",
        cls.__bases__,
        # A frozen base's ``__setattr__`` refuses: the draft's fields are set the plain way.
        # Nor does a base's ``__init__`` run (an event's, ``Event``'s): a draft is made bare,
        # by calling its class (``_made``), which is quicker than ``object.__new__(draft)``.
        {
            "__slots__": slots,
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__init__": object.__init__,
        },
    )
    probe: Any = object.__new__(draft)
    try:
        probe.__class__ = cls
    except TypeError as e:
        raise TypeError(f"{cls.__name__}: only records with slots are drafted ({e})") from None
    _DRAFTS[cls] = draft
    return draft


def _made(cls: type, name: str, params: str, values: dict[str, str]) -> Callable[..., Any]:
    """A function ``name(params)`` that makes a value of ``cls`` as a draft (``_draft``), each
    field set to the expression ``values`` gives it, written once as Python source."""
    source = (
        f"def {name}({params}):\n"
        "    _made = _draft()\n"
        + "".join(f"    _made.{n} = {v}\n" for n, v in values.items())
        + "    _made.__class__ = _cls\n"
        "    return _made\n"
    )
    scope: dict[str, Any] = {"_draft": _draft(cls), "_cls": cls}
    # The source is made from the class's own field names, as dataclasses makes its
    # ``__init__``: nothing from outside the model goes into it.
    exec(source, scope)
    made: Callable[..., Any] = scope[name]
    return made


def _changer(cls: type, changed: tuple[str, ...], keyword: bool) -> Callable[..., Any]:
    """A function of a value of ``cls`` and the new values of its fields ``changed``, named
    (``keyword``) or in that order, that makes the value with them: the other fields are
    copied as they are, one line each, with no test of whether each was given."""
    names = [f.name for f in fields(cls)]
    for n in changed:
        if n not in names:
            raise TypeError(f"{cls.__name__} has no field {n!r}")
    params = ", ".join(("_obj", *(("*",) if keyword and changed else ()), *changed))
    return _made(cls, "replace", params, {n: n if n in changed else f"_obj.{n}" for n in names})


def _replacer(key: tuple[Any, ...]) -> Callable[..., Any]:
    """``replace`` for values of class ``key[0]`` with the fields ``key[1:]`` changed, written
    once as Python source: each field set directly on a new object (``_draft``), with no
    ``__init__`` and no walk over the class's fields per call (a state has two dozen fields
    and is made twice a command)."""
    made = _changer(key[0], key[1:], keyword=True)
    _REPLACERS[key] = made
    return made


def replace(obj: T, /, **changes: Any) -> T:
    """``obj`` with ``changes``, as ``dataclasses.replace`` makes it, for the frozen values of
    the engine's model: a fold makes a few new values per event (``evolve``), and
    ``dataclasses.replace`` calls ``__init__`` after a walk over the fields, four times slower.
    A field name the class does not have raises ``TypeError``, as there."""
    key = (type(obj), *changes)
    made = _REPLACERS.get(key) or _replacer(key)
    return made(obj, **changes)  # type: ignore[no-any-return]


def replacer(cls: type[T], *changed: str) -> Callable[..., T]:
    """``replace`` for values of the record class ``cls`` with the fields ``changed`` given in
    that order, positionally: ``replacer(State, "seq")(state, 3)`` is ``replace(state,
    seq=3)`` without its look-up, for the state, which every event replaces."""
    return _changer(cls, changed, keyword=False)


def maker(cls: type[T]) -> Callable[..., T]:
    """A function that makes a value of the record class ``cls`` from all its fields, in
    order and positionally, as ``cls(...)`` would, without ``__init__``'s call per field
    (``_draft``): for the few values made on every event (the undo history's)."""
    names = [f.name for f in fields(cast(Any, cls))]
    return _made(cls, "make", ", ".join(names), {n: n for n in names})


@dataclass(frozen=True, slots=True)
class Actor:
    """Who issues a command: a role, the user it acts for, and where it came from.

    ``via`` records the path a command took when it was not typed by the user themself, e.g.
    ``"bridge:discord"`` or ``"plugin:surprise"`` (R16: plugin commands carry the plugin's name).
    """

    role: Role
    user: str | None = None
    via: str | None = None


NARRATOR = Actor("narrator")


@dataclass(frozen=True, slots=True)
class Reroll:
    """One edge or trouble reroll: which die, its face before and after, and the face kept."""

    reason: Literal["edge", "trouble"]
    die: int
    old: int
    new: int
    kept: int


@dataclass(frozen=True, slots=True)
class Check:
    """An initiative check with every die recorded (R2, R3).

    ``rolled`` holds the faces first rolled; ``faces`` the faces after rerolls. For d616 the third
    die is the Marvel die, and a face of 1 on it is the ``M``.
    """

    dice: str
    """Which dice: "d616", "d20", or whatever a third-party ruleset names."""
    rolled: tuple[int, ...]
    faces: tuple[int, ...]
    modifier: int
    total: int
    fantastic: bool = False
    ultimate: bool = False
    edges: int = 0
    troubles: int = 0
    rerolls: tuple[Reroll, ...] = ()
    supplied_by: str | None = None


@dataclass(frozen=True, slots=True)
class RollOff:
    """A roll-off among tied combatants (R4): each pass rolls for those still tied."""

    sides: int
    passes: tuple[tuple[tuple[str, int], ...], ...]


@dataclass(frozen=True, slots=True)
class Combatant:
    """A participant (R1). ``place`` is its current initiative number, which holds, readied
    actions and refocus change; ``check`` is the roll that set it first."""

    id: str
    name: str
    controller: str | None = None
    player_character: bool = False
    init_mod: int = 0
    dexterity: int = 10
    group: str | None = None
    tags: tuple[str, ...] = ()
    hidden: bool = False
    status: Status = "active"
    surprised: bool = False
    check: Check | None = None
    place: int | None = None
    reaction: bool = True


def perceives(watcher: Combatant, other: Combatant | None) -> bool:
    """Whether ``watcher``'s controller can see ``other`` (R16): everyone but a hidden one; a
    narrator-run watcher everyone; a player's own hidden combatants too."""
    return (
        other is None
        or not other.hidden
        or watcher.controller is None
        or watcher.controller == other.controller
    )


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """An action as declared, reserved or readied: kind, action type, description, targets."""

    kind: str
    type: str | None = None
    description: str = ""
    targets: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    zone: str | None = None


SUBSUMED_BY = {"move": "action_declared"}
"""A declared movement fires ``move``; it is a declared action too, so a predicate naming
``action_declared`` (say, with kind ``move``) matches it rather than silently never firing."""


@dataclass(frozen=True, slots=True)
class Predicate:
    """A machine-readable trigger: every non-empty field must match the trigger's facts."""

    events: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()

    def matches(self, facts: TriggerFacts) -> bool:
        """Whether a trigger-eligible moment with these facts fires this predicate (R12)."""
        return (
            (
                not self.events
                or facts.event in self.events
                or SUBSUMED_BY.get(facts.event) in self.events
            )
            and (not self.actors or facts.actor in self.actors)
            and (not self.kinds or facts.kind in self.kinds)
            and (not self.targets or bool(set(self.targets) & set(facts.targets)))
            and (not self.tags or bool(set(self.tags) & set(facts.tags)))
            and (not self.zones or facts.zone in self.zones)
        )


@dataclass(frozen=True, slots=True)
class Trigger:
    """A trigger as people say it, plus an optional predicate the engine can match."""

    text: str
    predicate: Predicate | None = None


@dataclass(frozen=True, slots=True)
class TriggerFacts:
    """What happened at a trigger-eligible moment (R12), in the terms predicates use."""

    event: str
    actor: str | None = None
    kind: str | None = None
    targets: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    zone: str | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reserved (marvel, R10) or readied (dnd3e, R11) action waiting for its trigger."""

    id: str
    combatant: str
    round: int
    mode: Literal["reserve", "ready"]
    reserved_type: str
    action: ActionSpec
    trigger: Trigger


@dataclass(frozen=True, slots=True)
class Hold:
    """A held (marvel) or delayed (dnd3e) turn (R9).

    ``seq`` orders holders by when they began holding; ``plan`` is when the held turn is to be
    taken: ``before``/``after`` another combatant, or ``at`` the named ``number``.
    """

    combatant: str
    seq: int
    round: int
    number: int | None = None
    plan: Literal["before", "after", "at"] | None = None
    target: str | None = None


@dataclass(frozen=True, slots=True)
class Clock:
    """One countdown of a condition: ``remaining`` boundaries of ``anchor``'s turns.

    ``skip`` is set when the condition was applied during the anchor's own turn with an ``end``
    boundary: the end of that turn does not count, so "until the end of X's next turn" is exact.
    """

    anchor: str
    boundary: Boundary
    remaining: int
    skip: bool = False


@dataclass(frozen=True, slots=True)
class Condition:
    """A condition on a combatant; it expires when every clock has run out (R8, R13)."""

    id: str
    type: str
    target: str
    source: str | None
    clocks: tuple[Clock, ...]
    surprisers: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class TurnRef:
    """Names a turn (R5): commands about the current turn carry this to avoid ``stale_turn``.

    ``number`` (the turn's ``Turn.number``) tells apart two turns of one combatant in one round,
    a held turn and the turn it was held from; without it, round and combatant must match."""

    round: int
    combatant: str
    number: int | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """The turn in progress and what has been spent in it."""

    round: int
    combatant: str
    kind: TurnKind
    started_at: float
    used: tuple[str, ...] = ()
    deadline: float | None = None
    warn_at: float | None = None
    warned: bool = False
    refocus: bool = False
    number: int = 0
    """How many turns the combat had started when this one started: a turn's own number."""

    @property
    def ref(self) -> TurnRef:
        return TurnRef(self.round, self.combatant, self.number)

    def named_by(self, ref: TurnRef) -> bool:
        """Whether ``ref`` names this turn (R5)."""
        return (
            ref.round == self.round
            and ref.combatant == self.combatant
            and (ref.number is None or ref.number == self.number)
        )

    @property
    def acted(self) -> bool:
        return bool(self.used)


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim in a reaction window: who reacts, with which reservation, doing what."""

    combatant: str
    reservation: str | None
    action: ActionSpec
    reserved_round: int | None = None
    faces: tuple[int, ...] | None = None
    """Physical dice for a fresh sequence check (R2, R12), if the claimant rolled its own."""
    supplied_by: str | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """A reaction window (R12) and, once closed with claims, the sequence resolving them."""

    id: str
    facts: TriggerFacts
    opened_at: float
    deadline: float
    offered: tuple[str, ...]
    action: ActionSpec | None = None
    claims: tuple[Claim, ...] = ()
    passes: tuple[str, ...] = ()
    status: Literal["open", "resolving"] = "open"
    sequence: tuple[str, ...] = ()
    index: int = 0

    @property
    def has_deadline(self) -> bool:
        """A window deadline of 0 s sets no wait: only answers (or the narrator) close it."""
        return self.deadline > self.opened_at


@dataclass(frozen=True, slots=True)
class Secret:
    """A stretch of a combat's log in which a combatant was hidden (R16): the events from seq
    ``since`` up to, not including, ``until`` (None: it is hidden still). Visibility is decided
    by what was hidden when an event happened, so these are kept whatever becomes of the
    combatant later: undone, removed, defeated or revealed."""

    combatant: str
    controller: str | None
    """Who sees it anyway: a player sees its own hidden combatants."""
    since: int
    until: int | None = None

    def covers(self, seq: int) -> bool:
        return self.since <= seq and (self.until is None or seq < self.until)


@dataclass(frozen=True, slots=True)
class Event:
    """A fact the engine records; the kinds are in ``events``, each with its wire ``name``."""

    name: ClassVar[str]

    def subjects(self) -> tuple[str, ...]:
        """Combatant ids this event is about; a hidden one keeps it from players (R16)."""
        return ()


@dataclass(frozen=True, slots=True)
class Done:
    """One undoable command as its state recorded it: its name and, in order, the events after
    its ``CommandRecorded`` that changed the state (those that did not are left out)."""

    command: str
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class Stretch:
    """Consecutive undoable commands and the state just before the first of them: folding the
    events of the first k of them into ``start`` gives the state before the k+1-th.

    A history's last stretch keeps its commands as values (``done``), ready to grow or be
    undone; the earlier ones, which only an undo that far back opens again, keep them packed
    (``packed``, ``count`` of them) in a fraction of the memory (see ``evolve``)."""

    start: State
    done: tuple[Done, ...] = ()
    packed: str = ""
    count: int = 0

    @property
    def size(self) -> int:
        """How many commands the stretch holds, packed or not."""
        return self.count if self.packed else len(self.done)


@dataclass(frozen=True, slots=True)
class History:
    """What undo needs (R15): the last commands' events in stretches, each from a checkpoint
    state (see ``evolve``), and how many of the last commands can still be undone: ``reach``
    (at most ``UNDO_DEPTH``; the stretches may hold a few older ones it no longer reaches)."""

    stretches: tuple[Stretch, ...] = ()
    reach: int = 0


@dataclass(frozen=True, slots=True)
class Measure:
    """The encoded size of a state's view as last measured (``decide.checks.measure``): the
    value of each of the view's fields then, its size, and for a tuple each item's size. A
    value still held (``is``) has its size known; only what changed since is measured."""

    values: tuple[object, ...]
    sizes: tuple[int, ...]
    items: tuple[tuple[int, ...] | None, ...]
    longest: int
    """The longest combatant id, encoded: the room kept for play counts ids this long."""
    size: int
    """The whole view's, encoded."""


@dataclass(frozen=True, slots=True)
class State:
    """One combat's whole state. Built only by folding events with ``evolve``."""

    combat_id: str = ""
    ruleset: str = ""
    options: tuple[tuple[str, OptionValue], ...] = ()
    phase: Phase = "none"
    round: int | None = None
    turn: Turn | None = None
    combatants: tuple[Combatant, ...] = ()
    order: tuple[str, ...] = ()
    reached: frozenset[str] = frozenset()
    bonus: tuple[str, ...] = ()
    holds: tuple[Hold, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    conditions: tuple[Condition, ...] = ()
    window: Window | None = None
    tie_order: tuple[str, ...] = ()
    disabled_plugins: tuple[str, ...] = ()
    """Plugins whose hooks are not called for this combat."""
    turns: int = 0
    """Turns started so far: the next turn's ``number`` is one more."""
    serial: int = 0
    last_command: str = ""
    undo: History = field(default=History(), repr=False)
    seq: int = field(default=0, compare=False)
    """Events folded so far: the seq of the last one. It is the log's, not the game's: undo
    restores the game exactly (R15), so state equality leaves it out, and it goes on."""
    secrets: tuple[Secret, ...] = field(default=(), compare=False)
    """Every stretch of the log in which a combatant was hidden, in the order they began. Like
    ``seq`` the log's record, kept across undo: an undone hidden combatant stays hidden in the
    events it had (R16)."""
    measured: Measure | None = field(
        default=None, compare=False, repr=False, metadata={"plain": False}
    )
    """A memo, not part of the combat: the view's size as measured on this state or one it
    came from (``Measure``), so that a size check measures only what changed. Never encoded
    (``plain``): a state decoded measures itself whole once."""

    def option(self, name: str) -> OptionValue:
        for key, value in self.options:
            if key == name:
                return value
        raise KeyError(name)

    def get(self, combatant_id: str) -> Combatant | None:
        for c in self.combatants:
            if c.id == combatant_id:
                return c
        return None

    def active(self, combatant_id: str) -> bool:
        c = self.get(combatant_id)
        return c is not None and c.status == "active"

    def hold_of(self, combatant_id: str) -> Hold | None:
        for h in self.holds:
            if h.combatant == combatant_id:
                return h
        return None


def next_deadline(state: State) -> float | None:
    """The earliest moment a ``Tick`` would change something (R13): an open window's deadline,
    the turn timer's warning or its expiry. A host schedules its next tick for then."""
    # No list and no ``min``: the daemon asks twice per command, and most states have no
    # deadline at all.
    window = state.window
    if window is not None:
        # No turn's time runs while a window is open or resolving.
        return window.deadline if window.status == "open" and window.has_deadline else None
    turn = state.turn
    if turn is None:
        return None
    deadline = turn.deadline
    warn_at = turn.warn_at
    if warn_at is not None and not turn.warned and (deadline is None or warn_at <= deadline):
        return warn_at  # the earlier, or the first of two alike, as ``min`` gives it
    return deadline
