"""The tie chain (R4): sorting checks into an order and slotting newcomers into it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .dice import DiceSource
from .model import RollOff


@dataclass(frozen=True, slots=True)
class Unit:
    """What takes one place in the tie chain: a combatant, or a group acting together."""

    members: tuple[str, ...]
    key: tuple[int, ...]


def roll_off(ids: Sequence[str], dice: DiceSource, sides: int) -> tuple[tuple[str, ...], RollOff]:
    """Order exact ties by rolling: higher first, and those still tied roll again (R4)."""
    passes: list[tuple[tuple[str, int], ...]] = []

    def resolve(tied: Sequence[str]) -> list[str]:
        if len(tied) == 1:
            return list(tied)
        rolls = tuple((i, dice.roll(sides)) for i in tied)
        passes.append(rolls)
        result: list[str] = []
        for face in sorted({r for _, r in rolls}, reverse=True):
            result += resolve([i for i, r in rolls if r == face])
        return result

    ordered = resolve(ids)
    return tuple(ordered), RollOff(sides, tuple(passes))


def sort_units(
    units: Sequence[Unit],
    dice: DiceSource,
    sides: int,
    supplied: Sequence[str] = (),
) -> tuple[list[Unit], list[RollOff]]:
    """Sort by key, higher first. An exact tie keeps a supplied order when every tied unit is
    in it, else rolls off."""
    ordered = sorted(units, key=lambda u: u.key, reverse=True)
    result: list[Unit] = []
    rolloffs: list[RollOff] = []
    i = 0
    while i < len(ordered):
        j = i
        while j < len(ordered) and ordered[j].key == ordered[i].key:
            j += 1
        cluster = ordered[i:j]
        if len(cluster) > 1:
            by_first = {u.members[0]: u for u in cluster}
            if all(u.members[0] in supplied for u in cluster):
                cluster = sorted(cluster, key=lambda u: supplied.index(u.members[0]))
            else:
                firsts, rolloff = roll_off(list(by_first), dice, sides)
                rolloffs.append(rolloff)
                cluster = [by_first[f] for f in firsts]
        result += cluster
        i = j
    return result, rolloffs


def slot_index(
    order: Sequence[str],
    key: Callable[[str], tuple[int, ...]],
    new_key: tuple[int, ...],
    tie: Callable[[str], bool],
) -> int:
    """Where a newcomer with ``new_key`` goes: before the first combatant it beats. On an exact
    tie ``tie(other)`` says whether it goes ahead of that combatant."""
    for index, other in enumerate(order):
        other_key = key(other)
        if new_key > other_key or (new_key == other_key and tie(other)):
            return index
    return len(order)
