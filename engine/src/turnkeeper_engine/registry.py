"""Registries of rulesets and condition types, open to third parties (plugins) by name."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → object. Registering a taken name is refused unless ``replace`` is asked for,
    so a plugin cannot silently shadow a bundled ruleset."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T, *, replace: bool = False) -> None:
        if name in self._items and not replace:
            raise ValueError(f"{self._what} {name!r} is already registered")
        self._items[name] = item

    def unregister(self, name: str) -> None:
        del self._items[name]

    def get(self, name: str) -> T | None:
        return self._items.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))


@dataclass(frozen=True, slots=True)
class ConditionType:
    """A kind of condition a combatant can have. ``rulesets`` empty means every ruleset."""

    name: str
    description: str
    rulesets: tuple[str, ...] = ()


CONDITION_TYPES: Registry[ConditionType] = Registry("condition type")
CONDITION_TYPES.register(
    "surprised",
    ConditionType(
        "surprised",
        "Surprised mid-combat: the surprisers have an edge on attacks against it (R8).",
        ("marvel",),
    ),
)
CONDITION_TYPES.register(
    "custom", ConditionType("custom", "A condition the table names in the note.")
)
