"""A combat kept in memory: ``decide`` then ``evolve``, for callers that hold one state."""

from __future__ import annotations

from . import commands as cmd
from . import events as ev
from .decide import decide
from .dice import DiceSource
from .errors import RuleError
from .evolve import evolve
from .model import NARRATOR, Actor, State
from .rulebook import RuleBook


class Engine:
    """One combat's state, the dice it rolls with and the rule book it plays by. Not
    thread-safe: one writer per combat."""

    def __init__(self, dice: DiceSource, state: State | None = None, *, rules: RuleBook) -> None:
        self.dice = dice
        self.rules = rules
        self.state: State = state or State()

    def handle(
        self, command: cmd.Command, now: float, actor: Actor = NARRATOR
    ) -> list[ev.Event] | RuleError:
        """Decide and, if accepted, apply. A refused command leaves the state untouched."""
        result = decide(self.state, command, now, actor=actor, dice=self.dice, rules=self.rules)
        if isinstance(result, RuleError):
            return result
        for event in result:
            self.state = evolve(self.state, event)
        return result
