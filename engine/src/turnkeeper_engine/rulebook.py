"""The rule book: the game systems (rulesets) and condition types combats may use, by name.

A value, never a registry: whoever runs the engine builds one and passes it to ``decide`` (and
to whatever else needs a ruleset's words or rules: narration, views, bots). The daemon's plugin
host starts from ``BUNDLED_RULES`` and extends it with what each plugin contributes; a program
using the engine as a library passes ``BUNDLED_RULES`` or a book of its own. Nothing is
registered by importing a module, so two books in one process never leak into each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from .rulesets import DND3E, MARVEL, Ruleset


@dataclass(frozen=True, slots=True)
class ConditionType:
    """A kind of condition a combatant can have. ``rulesets`` empty means every ruleset."""

    name: str
    description: str
    rulesets: tuple[str, ...] = ()


class NameTakenError(ValueError):
    """A ruleset or condition type whose name the book already gives to another."""


class RuleBook:
    """Rulesets and condition types by name; immutable. ``with_rulesets`` and
    ``with_condition_types`` make a larger book. A name is never given to a second item: adding
    one refuses with :class:`NameTakenError`, so nothing can silently shadow a ruleset; adding the
    very item already there changes nothing."""

    __slots__ = ("condition_types", "rulesets")

    rulesets: Mapping[str, Ruleset]
    """Each ruleset by its ``name``."""
    condition_types: Mapping[str, ConditionType]
    """Each condition type by its ``name``."""

    def __init__(
        self, rulesets: Iterable[Ruleset] = (), condition_types: Iterable[ConditionType] = ()
    ) -> None:
        self.rulesets = MappingProxyType(_by_name("ruleset", {}, rulesets))
        self.condition_types = MappingProxyType(_by_name("condition type", {}, condition_types))

    def ruleset(self, name: str) -> Ruleset | None:
        """The ruleset named ``name``, if the book has it."""
        return self.rulesets.get(name)

    def condition_type(self, name: str) -> ConditionType | None:
        """The condition type named ``name``, if the book has it."""
        return self.condition_types.get(name)

    def with_rulesets(self, rulesets: Iterable[Ruleset]) -> RuleBook:
        """This book and ``rulesets``; :class:`NameTakenError` if a name is another's already."""
        added = _by_name("ruleset", self.rulesets, rulesets)
        return RuleBook(added.values(), self.condition_types.values())

    def with_condition_types(self, condition_types: Iterable[ConditionType]) -> RuleBook:
        """This book and ``condition_types``; :class:`NameTakenError` if a name is another's."""
        added = _by_name("condition type", self.condition_types, condition_types)
        return RuleBook(self.rulesets.values(), added.values())

    def __repr__(self) -> str:
        names = list(self.rulesets), list(self.condition_types)
        return f"RuleBook(rulesets={names[0]}, condition_types={names[1]})"


Named = TypeVar("Named", Ruleset, ConditionType)


def _by_name(what: str, known: Mapping[str, Named], items: Iterable[Named]) -> dict[str, Named]:
    found = dict(known)
    for item in items:
        taken = found.get(item.name)
        if taken is not None and taken is not item:
            raise NameTakenError(f"{what} {item.name!r} is already in the rule book")
        found[item.name] = item
    return found


SURPRISED = ConditionType(
    "surprised",
    "Surprised mid-combat: the surprisers have an edge on attacks against it (R8).",
    ("marvel",),
)
"""marvel's mid-combat surprise (R8): the engine's ``surprise`` command applies it."""
CUSTOM = ConditionType("custom", "A condition the table names in the note.")
"""Whatever a table tracks that no plugin named: its note says what."""

BUNDLED_RULES = RuleBook((MARVEL, DND3E), (SURPRISED, CUSTOM))
"""The rulesets and condition types Turnkeeper ships: marvel, dnd3e, ``surprised`` and
``custom``. The daemon's plugin host starts from it; plugins add to a copy, never to it."""
