"""Typed, read-only views of a combat for plugins and bots.

The engine's values (combatants, checks, turns, reservations, events) are frozen dataclasses
already; a :class:`CombatView` wraps one combat with the questions plugins and bots ask of it,
so none needs to know how the state is laid out, and none can change it. Plugins get the whole
engine ``State``; a bot gets the ``View`` its role may see (``get_combat``), which has the same
questions to answer, rule options included.

Beside it, what plugins read tags with (``side``, ``tag_number``) and record outcomes with:
``recorded_about`` (whom an outcome is about, R16) and ``outcome`` (an outcome a table can
read in its own language).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from turnkeeper_engine import RuleBook, Ruleset, State, View
from turnkeeper_engine.commands import RecordOutcome
from turnkeeper_engine.model import (
    Combatant,
    Condition,
    Hold,
    OptionValue,
    Phase,
    Reservation,
    Turn,
    Window,
)


@dataclass(frozen=True, slots=True)
class CombatView:
    """One combat as a command left it, at sequence number ``seq``: the engine's whole ``State``
    (plugins) or a role's ``View`` of it (bots, from ``get_combat``), with the rule book it is
    played by (``book``: the daemon's for plugins, the bot's own for bots)."""

    state: State | View
    seq: int
    book: RuleBook

    @property
    def id(self) -> str:
        return self.state.combat_id

    @property
    def ruleset(self) -> str:
        return self.state.ruleset

    @property
    def rules(self) -> Ruleset | None:
        """The combat's ruleset, from the rule book; None if the book does not have it."""
        return self.book.ruleset(self.state.ruleset)

    @property
    def phase(self) -> Phase:
        return self.state.phase

    @property
    def round(self) -> int | None:
        return self.state.round

    @property
    def turn(self) -> Turn | None:
        return self.state.turn

    @property
    def window(self) -> Window | None:
        return self.state.window

    @property
    def combatants(self) -> tuple[Combatant, ...]:
        """Every combatant in the order added, removed ones included."""
        return self.state.combatants

    @property
    def holds(self) -> tuple[Hold, ...]:
        return self.state.holds

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return self.state.reservations

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return self.state.conditions

    def combatant(self, combatant_id: str) -> Combatant | None:
        for c in self.state.combatants:
            if c.id == combatant_id:
                return c
        return None

    def order(self) -> tuple[Combatant, ...]:
        """The combatants in initiative order (R4), as the order stands now."""
        by_id = {c.id: c for c in self.state.combatants}
        return tuple(by_id[i] for i in self.state.order if i in by_id)

    def active(self) -> tuple[Combatant, ...]:
        """Combatants still taking turns, in the order added."""
        return tuple(c for c in self.state.combatants if c.status == "active")

    def current(self) -> Combatant | None:
        """Whose turn it is, if a turn is in progress."""
        turn = self.state.turn
        return None if turn is None else self.combatant(turn.combatant)

    def reservations_of(self, combatant_id: str) -> tuple[Reservation, ...]:
        return tuple(r for r in self.state.reservations if r.combatant == combatant_id)

    def offered(self, window: Window) -> tuple[Reservation, ...]:
        """The reservations a window was offered for, in the window's order: those whose
        predicate matches its facts; for a combatant offered by the narrator's hand (none of
        its predicates matching), all of its reservations, since the narrator judged its
        trigger's words met."""
        found: list[Reservation] = []
        for combatant in window.offered:
            own = self.reservations_of(combatant)
            matching = [
                r
                for r in own
                if r.trigger.predicate is not None and r.trigger.predicate.matches(window.facts)
            ]
            found.extend(matching or own)
        return tuple(found)

    def conditions_on(self, combatant_id: str) -> tuple[Condition, ...]:
        return tuple(c for c in self.state.conditions if c.target == combatant_id)

    def option(self, name: str) -> OptionValue:
        """A rule option's value (R6, R9, R12, R13); KeyError for an unknown name (or, on the
        ``View`` of a daemon older than the view's ``options``, for every name)."""
        for key, value in self.state.options:
            if key == name:
                return value
        raise KeyError(name)


PLAYERS_SIDE = "players"
NARRATOR_SIDE = "narrator"
"""The sides of combatants without a ``side:`` tag: player characters against the rest."""


def side(combatant: Combatant) -> str:
    """The side a combatant fights on: its ``side:`` tag, else players against the narrator.
    The bundled plugins and bots agree on it, so a table tags sides once."""
    for tag in combatant.tags:
        if tag.startswith("side:") and tag != "side:":
            return tag.removeprefix("side:")
    return PLAYERS_SIDE if combatant.player_character else NARRATOR_SIDE


MAX_TAG_NUMBER = 1000
"""Largest number a ``name:<N>`` tag may give, either sign: far beyond any score, bonus, level
or damage of either bundled ruleset, and it keeps sums inside the engine's bounds on recorded
numbers. A larger one counts as missing."""


def tag_number(name: str, *tag_lists: Iterable[str]) -> int | None:
    """The value of the first ``name:<N>`` tag, across ``tag_lists`` in order, that is a whole
    number within ``MAX_TAG_NUMBER``; None if there is none. Bridges tell plugins figures this
    way (``stealth:4``, ``spell_level:3``)."""
    prefix = f"{name}:"
    for tags in tag_lists:
        for tag in tags:
            if tag.startswith(prefix):
                try:
                    value = int(tag.removeprefix(prefix))
                except ValueError:
                    continue
                if abs(value) <= MAX_TAG_NUMBER:
                    return value
    return None


def recorded_about(*combatants: Combatant | None) -> str | None:
    """Whom an outcome involving these combatants is recorded about: a hidden one if any, so
    the outcome stays hidden from players as it is (R16); else the first one."""
    present = [c for c in combatants if c is not None]
    if not present:
        return None
    return next((c for c in present if c.hidden), present[0]).id


def outcome(
    kind: str,
    template: str,
    combatant: str | None = None,
    values: tuple[tuple[str, OptionValue], ...] = (),
    /,
    **args: OptionValue,
) -> RecordOutcome:
    """A ``record_outcome`` whose text a table can read in its own language: ``template``
    filled in with ``args`` is the English ``text``, and both travel with the outcome, so the
    daemon tells it from its catalogue (docs/plugins.md).

    Write ``template`` as a string literal at the call, with named placeholders for the
    pieces (``outcome("dc", "{name} needs {dc}.", about, name=c.name, dc=15)``), never an
    f-string: catalogues are extracted from the source. ``kind``, ``combatant`` and ``values``
    are ``RecordOutcome``'s; any other name is a placeholder's.
    """
    return RecordOutcome(
        kind, template.format(**args), combatant, values, template, tuple(args.items())
    )
