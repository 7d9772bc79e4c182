"""A combat kept in memory: ``decide`` then ``evolve``, for callers that hold one state."""

from __future__ import annotations

from . import commands as cmd
from . import events as ev
from .decide import decide
from .dice import DiceSource, SystemDice
from .errors import RuleError
from .evolve import evolve
from .model import NARRATOR, Actor, State


class Engine:
    """One combat's state and the dice it rolls with. Not thread-safe: one writer per combat."""

    def __init__(self, dice: DiceSource | None = None, state: State | None = None) -> None:
        self.dice: DiceSource = dice or SystemDice()
        self.state: State = state or State()

    def handle(
        self, command: cmd.Command, now: float, actor: Actor = NARRATOR
    ) -> list[ev.Event] | RuleError:
        """Decide and, if accepted, apply. A refused command leaves the state untouched."""
        result = decide(self.state, command, now, actor=actor, dice=self.dice)
        if isinstance(result, RuleError):
            return result
        for event in result:
            self.state = evolve(self.state, event)
        return result
