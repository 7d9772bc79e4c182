"""The plugin authors' kit: run a combat in process with a chosen set of plugins, step it with
commands, and assert on the events.

Installed as a pytest plugin (entry point ``pytest11``), it gives every test the
``turnkeeper_table`` fixture::

    def test_my_plugin_marks_surprise(turnkeeper_table):
        table = turnkeeper_table("marvel", plugins={"mine": my_plugin})
        table.add("spy", init_mod=2, tags=("unaware",))
        table.do(commands.StartCombat())
        assert table.named("surprise_marked")

Commands take the daemon's own write pipeline (:mod:`turnkeeper_engine.pipeline`), with the
same :class:`~turnkeeper_sdk.plugins.PluginHost` calling the hooks, with the same isolation (each
plugin in its own thread), budgets and rules for what a plugin may propose: only the store and
the subscribers are left out (the table keeps the log in memory). Dice are seeded, time is a
number the test moves.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio
import pytest

from turnkeeper_engine import BUNDLED_RULES, NARRATOR, Actor, DiceSource, RuleBook, State
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine.dice import SeededDice
from turnkeeper_engine.model import OptionValue, TurnRef
from turnkeeper_engine.pipeline import Applied, MemoryLog, Pipeline, at_once

from .plugins import DEFAULT_BUDGET, PluginHost
from .views import CombatView

E = TypeVar("E", bound=ev.Event)

START_TIME = 1_000_000.0
"""The table's clock starts here (epoch seconds); ``advance`` moves it."""


class _TableLog(MemoryLog):
    """The table's combat: committed in memory, every event kept, hooks due in a queue."""

    def __init__(self, observes: Callable[[Applied], bool]) -> None:
        super().__init__()
        self.events: list[tuple[int, ev.Event]] = []
        self.hooks_due: deque[Applied] = deque()
        self._observes = observes

    async def commit(self, applied: Applied, context: object) -> None:
        await super().commit(applied, context)
        self.events.extend(enumerate(applied.events, start=applied.first))

    def due(self, applied: Applied, context: object) -> None:
        # As the daemon: a command none of the plugins' hooks stands for is not queued, so a
        # plugin's tests fail here if the host would wrongly skip its hook there.
        if self._observes(applied):
            self.hooks_due.append(applied)


class Table:
    """One combat in process, with plugins. Commands go through the daemon's pipeline: plugins'
    before hooks, the engine, then every hook the events stand for, in commit order, and the
    commands plugins propose, recorded as theirs. ``rules`` is the rule book the table starts
    from; the plugins' rulesets and condition types are added to it, as in the daemon."""

    def __init__(
        self,
        ruleset: str = "marvel",
        plugins: Mapping[str, object] | None = None,
        *,
        seed: int = 1,
        dice: DiceSource | None = None,
        budget: float = DEFAULT_BUDGET,
        options: Mapping[str, OptionValue] | None = None,
        combat_id: str = "table",
        rules: RuleBook = BUNDLED_RULES,
    ) -> None:
        self.problems: list[tuple[str, dict[str, Any]]] = []
        """What the host reported: failures, refusals, disabled plugins."""
        self.host = PluginHost(budget=budget, report=self._report, rules=rules)
        for name, plugin in (plugins or {}).items():
            if self.host.register(plugin, name) is None:
                raise ValueError(f"plugin {name!r} did not load: {self.host.failures[-1].error}")
        self.dice = dice or SeededDice(seed)
        self.now = START_TIME
        self._log = _TableLog(self.host.after_due)
        self._pipeline: Pipeline[object] = Pipeline(
            self.dice, lambda: self.now, self.host, rules=self.host.rules
        )
        # No hook stands for a combat's creation, and its start awaits nothing: stepped here
        # without an event loop, so that a table can be made inside an async test too.
        create = cmd.CreateCombat(combat_id, ruleset, tuple((options or {}).items()))
        at_once(self._pipeline.run(self._log, NARRATOR, create))
        self._log.hooks_due.clear()

    def _report(self, what: str, **details: Any) -> None:
        self.problems.append((what, details))

    @property
    def state(self) -> State:
        return self._log.state

    @property
    def seq(self) -> int:
        return self._log.seq

    @property
    def log(self) -> list[tuple[int, ev.Event]]:
        """Every event so far, with its sequence number."""
        return self._log.events

    # ------------------------------------------------------------------------------ stepping

    def do(self, command: cmd.Command, actor: Actor = NARRATOR) -> list[ev.Event]:
        """Apply a command and let the plugins react; return every event it led to, plugin
        commands' events included. A refused command raises
        :class:`~turnkeeper_engine.pipeline.RefusedError`."""
        start = len(self.log)
        anyio.run(self._do, command, actor)
        return [e for _, e in self.log[start:]]

    async def ado(self, command: cmd.Command, actor: Actor = NARRATOR) -> list[ev.Event]:
        """``do`` for async tests, on the test's own event loop."""
        start = len(self.log)
        await self._do(command, actor)
        return [e for _, e in self.log[start:]]

    async def _do(self, command: cmd.Command, actor: Actor) -> None:
        await self._pipeline.run(self._log, actor, command)
        # As the daemon's hook workers do: each committed command's hooks in commit order,
        # those of the commands plugins cause included.
        due = self._log.hooks_due
        while due:
            await self._pipeline.react(self._log, due.popleft())

    def advance(self, seconds: float) -> list[ev.Event]:
        """Let time pass and tick, as the daemon's clock would (R13)."""
        self.now += seconds
        return self.do(cmd.Tick())

    # ----------------------------------------------------------------------------- shortcuts

    def add(self, combatant_id: str, **fields: Any) -> list[ev.Event]:
        """Add a combatant: ``display_name`` defaults to the id."""
        fields.setdefault("display_name", combatant_id)
        return self.do(cmd.AddCombatant(combatant_id, **fields))

    def start(self) -> list[ev.Event]:
        return self.do(cmd.StartCombat())

    def end_turn(self, actor: Actor = NARRATOR) -> list[ev.Event]:
        """End the current turn."""
        return self.do(cmd.EndTurn(self.turn()), actor)

    def turn(self) -> TurnRef:
        """The current turn, to name it in a command (R5)."""
        assert self.state.turn is not None, "no turn is in progress"
        return self.state.turn.ref

    # ------------------------------------------------------------------------------ asserting

    @property
    def view(self) -> CombatView:
        return CombatView(self.state, self.seq, self.host.rules)

    @property
    def events(self) -> list[ev.Event]:
        return [e for _, e in self.log]

    def named(self, name: str) -> list[ev.Event]:
        """Every event with this wire name, in order."""
        return [e for _, e in self.log if e.name == name]

    def of(self, kind: type[E]) -> list[E]:
        """Every event of this type, in order."""
        return [e for _, e in self.log if isinstance(e, kind)]

    def by(self, plugin: str) -> list[str]:
        """The commands recorded as this plugin's, in order."""
        via = f"plugin:{plugin}"
        return [
            e.command
            for _, e in self.log
            if isinstance(e, ev.CommandRecorded) and e.actor.via == via
        ]


@pytest.fixture
def turnkeeper_table() -> Callable[..., Table]:
    """A factory of in-process tables: ``turnkeeper_table(ruleset, plugins={...}, seed=...)``
    takes the arguments of :class:`Table`."""
    return Table
