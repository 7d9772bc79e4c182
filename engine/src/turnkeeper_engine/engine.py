"""A combat kept in memory, for callers that hold one state: the write pipeline with a
memory log and no plugins, driven without an event loop."""

from __future__ import annotations

from . import commands as cmd
from . import events as ev
from .dice import DiceSource
from .errors import RuleError
from .model import NARRATOR, Actor, State
from .pipeline import MemoryLog, Pipeline, RefusedError, at_once
from .rulebook import RuleBook


class Engine:
    """One combat's state, the dice it rolls with and the rule book it plays by. Not
    thread-safe: one writer per combat."""

    def __init__(self, dice: DiceSource, state: State | None = None, *, rules: RuleBook) -> None:
        self.dice = dice
        self.rules = rules
        self._log = MemoryLog(state)

    @property
    def state(self) -> State:
        return self._log.state

    def handle(
        self, command: cmd.Command, now: float, actor: Actor = NARRATOR
    ) -> list[ev.Event] | RuleError:
        """Decide and, if accepted, apply. A refused command leaves the state untouched."""
        pipeline: Pipeline[object] = Pipeline(self.dice, lambda: now, rules=self.rules)
        try:
            applied = at_once(pipeline.run(self._log, actor, command))
        except RefusedError as refused:
            if refused.rule is None:  # only the engine refuses: a memory log keeps all
                raise
            return refused.rule
        return list(applied.events) if applied is not None else []
