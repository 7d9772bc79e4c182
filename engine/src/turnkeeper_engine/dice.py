"""Dice: injected sources and the d616 / d20 initiative checks (R2, R3).

The engine never rolls on its own: every roll goes through a ``DiceSource`` handed to ``decide``,
and every face lands in an event, so replaying events never rolls again.
"""

from __future__ import annotations

import random
import secrets
from typing import Protocol

from .errors import Rejected
from .model import Check, Reroll

D616_MARVEL_DIE = 2
"""Index of the Marvel die among the three d616 dice."""


class DiceSource(Protocol):
    """Where faces come from. ``roll(6)`` returns 1–6."""

    def roll(self, sides: int) -> int: ...


class SystemDice:
    """The default source: the operating system's cryptographic generator."""

    def roll(self, sides: int) -> int:
        return secrets.randbelow(sides) + 1


class SeededDice:
    """A reproducible source for tests and demos."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def roll(self, sides: int) -> int:
        return self._random.randint(1, sides)


class _Supplied:
    """Faces a player rolled on physical dice (R2), validated as they are consumed."""

    def __init__(self, faces: tuple[int, ...]) -> None:
        self._faces = faces
        self._next = 0

    def roll(self, sides: int) -> int:
        if self._next >= len(self._faces):
            raise Rejected("invalid_faces", "not enough faces supplied for this check", "faces")
        face = self._faces[self._next]
        if not 1 <= face <= sides:
            raise Rejected(
                "invalid_faces",
                "face {face} is not on a d{sides}",
                f"faces[{self._next}]",
                face=face,
                sides=sides,
            )
        self._next += 1
        return face

    def finish(self) -> None:
        if self._next != len(self._faces):
            raise Rejected(
                "invalid_faces",
                "{supplied} faces supplied, the check uses {used}",
                "faces",
                supplied=len(self._faces),
                used=self._next,
            )


def _d616_value(index: int, face: int) -> int:
    """What a die adds to the total: the Marvel die's M (a 1) counts as 6."""
    return 6 if index == D616_MARVEL_DIE and face == 1 else face


def _d616_rank(index: int, face: int) -> int:
    """How good a die is when keeping the better or worse face: an M beats a plain 6."""
    return 7 if index == D616_MARVEL_DIE and face == 1 else face


def _d616_lowest(faces: list[int]) -> int:
    # Among equal dice an edge rerolls a regular die, so the Marvel die is the last choice.
    return min(range(3), key=lambda i: (_d616_value(i, faces[i]), i == D616_MARVEL_DIE, i))


def _d616_highest(faces: list[int]) -> int:
    # Among equal dice a trouble rerolls the Marvel die first.
    return max(range(3), key=lambda i: (_d616_value(i, faces[i]), i == D616_MARVEL_DIE, -i))


def roll_d616(
    dice: DiceSource,
    modifier: int,
    edges: int = 0,
    troubles: int = 0,
    faces: tuple[int, ...] | None = None,
    supplied_by: str | None = None,
) -> Check:
    """Roll a d616 check (R3). With ``faces`` the player's own dice are used, rerolls included."""
    source: DiceSource = _Supplied(faces) if faces is not None else dice
    rolled = [source.roll(6) for _ in range(3)]
    current = list(rolled)
    net_edges, net_troubles = max(edges - troubles, 0), max(troubles - edges, 0)
    rerolls: list[Reroll] = []
    for _ in range(net_edges):
        i = _d616_lowest(current)
        new = source.roll(6)
        kept = new if _d616_rank(i, new) > _d616_rank(i, current[i]) else current[i]
        rerolls.append(Reroll("edge", i, current[i], new, kept))
        current[i] = kept
    for _ in range(net_troubles):
        i = _d616_highest(current)
        new = source.roll(6)
        kept = new if _d616_rank(i, new) < _d616_rank(i, current[i]) else current[i]
        rerolls.append(Reroll("trouble", i, current[i], new, kept))
        current[i] = kept
    if isinstance(source, _Supplied):
        source.finish()
    fantastic = current[D616_MARVEL_DIE] == 1
    return Check(
        dice="d616",
        rolled=tuple(rolled),
        faces=tuple(current),
        modifier=modifier,
        total=sum(_d616_value(i, f) for i, f in enumerate(current)) + modifier,
        fantastic=fantastic,
        ultimate=fantastic and current[0] == 6 and current[1] == 6,
        edges=edges,
        troubles=troubles,
        rerolls=tuple(rerolls),
        supplied_by=supplied_by if faces is not None else None,
    )


def roll_d20(
    dice: DiceSource,
    modifier: int,
    faces: tuple[int, ...] | None = None,
    supplied_by: str | None = None,
) -> Check:
    """Roll a d20 initiative check: d20 + initiative bonus."""
    source: DiceSource = _Supplied(faces) if faces is not None else dice
    face = source.roll(20)
    if isinstance(source, _Supplied):
        source.finish()
    return Check(
        dice="d20",
        rolled=(face,),
        faces=(face,),
        modifier=modifier,
        total=face + modifier,
        supplied_by=supplied_by if faces is not None else None,
    )


def d616_display(check: Check) -> str:
    """Faces as a table reads them, the Marvel die's 1 shown as ``M``: ``"6, 3, M"``."""
    shown = [str(f) for f in check.faces]
    if check.dice == "d616" and check.faces[D616_MARVEL_DIE] == 1:
        shown[D616_MARVEL_DIE] = "M"
    return ", ".join(shown)
