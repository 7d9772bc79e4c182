"""Helpers that let a test read like the rule it proves: given a combat, when a command, then
these events. In-memory on purpose: the engine is pure, so these are its unit tests."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from turnkeeper_engine import (
    BUNDLED_RULES,
    NARRATOR,
    Actor,
    Engine,
    RuleBook,
    RuleError,
    State,
    evolve,
)
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import TurnRef


class QueueDice:
    """Dice faces a test lines up in advance; running dry fails the test loudly."""

    def __init__(self) -> None:
        self.faces: deque[int] = deque()

    def push(self, *faces: int) -> None:
        self.faces.extend(faces)

    def roll(self, sides: int) -> int:
        assert self.faces, f"the test did not line up a face for a d{sides}"
        face = self.faces.popleft()
        assert 1 <= face <= sides, f"{face} is not on a d{sides}"
        return face


class Story:
    """One combat driven through the engine, keeping every event it produced, by the rulesets
    of ``rules``."""

    def __init__(self, ruleset: str, *, rules: RuleBook = BUNDLED_RULES, **options: Any) -> None:
        self.dice = QueueDice()
        self.engine = Engine(self.dice, rules=rules)
        self.now = 0.0
        self.log: list[ev.Event] = []
        self.do(c.CreateCombat("test", ruleset, tuple(options.items())))

    @property
    def state(self) -> State:
        return self.engine.state

    def do(
        self, command: c.Command, actor: Actor = NARRATOR, now: float | None = None
    ) -> list[ev.Event]:
        """Run a command that must be accepted; return its events."""
        if now is not None:
            self.now = now
        before = self.engine.state
        result = self.engine.handle(command, self.now, actor)
        assert not isinstance(result, RuleError), f"{command.name} refused: {result}"
        replayed = before
        for event in result:
            replayed = evolve(replayed, event)
        assert replayed == self.engine.state
        self.log += result
        return result

    def refuse(self, command: c.Command, actor: Actor = NARRATOR) -> RuleError:
        """Run a command that must be refused, and check nothing changed."""
        before = self.engine.state
        result = self.engine.handle(command, self.now, actor)
        assert isinstance(result, RuleError), f"{command.name} was accepted: {result}"
        assert self.engine.state == before
        return result

    def add(self, combatant_id: str, name: str | None = None, **fields: Any) -> list[ev.Event]:
        return self.do(c.AddCombatant(combatant_id, name or combatant_id.title(), **fields))

    def roll(self, combatant_id: str, *faces: int, **fields: Any) -> list[ev.Event]:
        return self.do(c.RollInitiative(combatant_id, faces=faces or None, **fields))

    @property
    def turn(self) -> TurnRef:
        assert self.state.turn is not None, "no turn in progress"
        return self.state.turn.ref

    @property
    def current(self) -> str:
        return self.turn.combatant

    def end_turn(self, actor: Actor = NARRATOR) -> list[ev.Event]:
        return self.do(c.EndTurn(self.turn), actor)

    def run_round(self) -> list[str]:
        """End turns until the round changes; return who had a turn, in order."""
        start = self.state.round
        seen = [self.current]
        while True:
            self.end_turn()
            if self.state.round != start:
                return seen
            seen.append(self.current)


def faces(ruleset: str, total: int) -> tuple[int, ...]:
    """Faces that add up to ``total`` with no Fantastic (marvel: 4–18, dnd3e: 1–20)."""
    if ruleset == "dnd3e":
        return (total,)
    marvel_die = max(2, total - 12)
    rest = total - marvel_die
    first = min(6, rest - 1)
    return (first, rest - first, marvel_die)


def names(events: list[ev.Event]) -> list[str]:
    return [e.name for e in events if not isinstance(e, ev.CommandRecorded)]


def of(events: list[ev.Event], kind: type[ev.Event]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def player(user: str) -> Actor:
    return Actor("player", user)


OBSERVER = Actor("observer")
__all__ = ["OBSERVER", "QueueDice", "Story", "faces", "names", "of", "player", "replace"]
