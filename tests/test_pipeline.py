"""The one write pipeline: the daemon's hub and the plugin test kit run the same one, so a plugin
scenario gives the same log through either, and the engine decides each command once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from turnkeeper.combats import Hub
from turnkeeper.store import Store
from turnkeeper_engine import BUNDLED_RULES, NARRATOR, SeededDice, State, pipeline
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine.decide import context
from turnkeeper_engine.model import ActionSpec
from turnkeeper_engine.pipeline import MemoryLog, Pipeline, at_once
from turnkeeper_engine.plain import event_from_plain
from turnkeeper_sdk import CheckAdjustment, CombatView, hookimpl
from turnkeeper_sdk.plugins import PluginHost
from turnkeeper_sdk.testing import START_TIME, Table


class Busy:
    """Hooks of every kind, each proposing something, so the order of hooks, proposals and the
    commands they cause shows in the log."""

    @hookimpl
    def before_combat_start(self, combat: CombatView) -> cmd.Command:
        return cmd.RecordOutcome("note", f"before the start, at seq {combat.seq}")

    @hookimpl
    def before_initiative_check(self, combatant: Any) -> CheckAdjustment | None:
        return CheckAdjustment(edges=1, reason="keen") if combatant.id == "a" else None

    @hookimpl
    def before_action_declared(self, combatant: Any) -> cmd.Command:
        return cmd.RecordOutcome("note", f"{combatant.id} is about to act")

    @hookimpl
    def on_turn_start(self, combatant: Any) -> list[cmd.Command]:
        return [cmd.ApplyCondition(combatant.id, "custom", note=f"turn of {combatant.id}")]

    @hookimpl
    def on_condition_applied(self, condition: Any) -> cmd.Command:
        return cmd.RecordOutcome("note", f"condition on {condition.target}")

    @hookimpl
    def on_round_end(self, round: int) -> cmd.Command:
        return cmd.RecordOutcome("note", f"round {round} is over")


def _script(turn: Any) -> list[cmd.Command]:
    return [cmd.DeclareAction(turn, ActionSpec("attack")), cmd.EndTurn(turn)]


SETUP = [
    cmd.AddCombatant("a", "A", init_mod=2),
    cmd.AddCombatant("b", "B", init_mod=1),
    cmd.StartCombat(),
]


def _through_the_table() -> list[ev.Event]:
    table = Table("marvel", {"busy": Busy()}, seed=3, combat_id="t")
    for command in SETUP:
        table.do(command)
    for _ in range(3):
        for command in _script(table.turn()):
            table.do(command)
    assert table.problems == []
    return table.events


async def _through_the_hub(tmp_path: Path) -> list[ev.Event]:
    plugins = PluginHost()
    plugins.register(Busy(), "busy")
    store = Store.open(tmp_path)
    hub = Hub(store, dice=SeededDice(3), clock=lambda: START_TIME, plugins=plugins)
    n = 0

    async def do(command: cmd.Command) -> None:
        nonlocal n
        n += 1
        await hub.execute("p", NARRATOR, "t", command, f"r{n}")
        combat = await hub.combat("t")
        # What the hub's hook workers do, one committed command after another.
        while combat.hooks_due:
            await hub.hooks.run_due(hub.writer, combat)

    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await do(cmd.CreateCombat("t", "marvel"))
        for command in SETUP:
            await do(command)
        for _ in range(3):
            state = (await hub.combat("t")).state
            assert state.turn is not None
            for command in _script(state.turn.ref):
                await do(command)
        stored = await store.events_after("t", 0, 1000)
        await store.stop()
    store.close()
    plugins.stop()
    return [event_from_plain(body) for _, body in stored]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_test_kit_and_the_daemon_give_a_plugin_scenario_the_same_log(
    tmp_path: Path,
) -> None:
    """Before hooks, the engine, after hooks and what plugins propose, in the same order with
    the same dice and clock: event for event the same log, plugins' commands included."""
    table = await anyio.to_thread.run_sync(_through_the_table)
    hub = await _through_the_hub(tmp_path)
    assert [e.name for e in hub] == [e.name for e in table]
    assert hub == table
    via = [e.actor.via for e in table if isinstance(e, ev.CommandRecorded)]
    assert "plugin:busy" in via


def test_the_engine_decides_each_command_once_with_a_plugin_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No dry run before the hooks and no decision repeated: a plugin with before and after
    hooks, its proposals included, costs one decision per command recorded. (Only a before
    hook that changes the combat first has its command decided again, on what it changed.)"""
    calls: list[str] = []
    seen: list[str] = []
    decide = pipeline.decide_folded

    def counted(state: Any, command: cmd.Command, now: float, **kwargs: Any) -> Any:
        calls.append(command.name)
        return decide(state, command, now, **kwargs)

    class Watches:
        @hookimpl
        def before_action_declared(self, combatant: Any) -> None:
            seen.append(combatant.id)

        @hookimpl
        def on_action_declared(self, combatant: Any) -> None:
            return None

        @hookimpl
        def on_turn_start(self, combatant: Any) -> cmd.Command:
            return cmd.RecordOutcome("note", f"{combatant.id} starts")

    table = Table("dnd3e", {"watches": Watches()}, seed=1)
    table.add("a", init_mod=2)
    table.add("b")
    table.start()
    turn = table.turn()
    monkeypatch.setattr(pipeline, "decide_folded", counted)
    table.do(cmd.EndTurn(turn))
    turn = table.turn()
    table.do(cmd.DeclareAction(turn, ActionSpec("attack")))
    table.do(cmd.DeclareAction(turn, ActionSpec("move")))
    table.do(cmd.EndTurn(turn))
    recorded = [e.command for e in table.of(ev.CommandRecorded)]
    assert calls == recorded[-len(calls) :]
    assert calls.count("record_outcome") == 2
    assert calls.count("declare_action") == 2
    assert seen == [turn.combatant] * 2


def test_each_event_is_folded_once_and_applied_keeps_the_states_deciding_folded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deciding folds each event as it makes it; the pipeline keeps those states (its
    ``Applied.states``) rather than fold the events again: one fold per event, and the states
    are those a fold of the events from the log's state gives."""
    log = MemoryLog()
    run = Pipeline(SeededDice(1), lambda: 5.0, rules=BUNDLED_RULES)
    at_once(run.run(log, NARRATOR, cmd.CreateCombat("t", "marvel")))
    at_once(run.run(log, NARRATOR, cmd.AddCombatant("k", "K")))
    folded: list[ev.Event] = []
    made: list[State] = []
    fold = context.evolve

    def counted(state: State, event: ev.Event) -> State:
        folded.append(event)
        made.append(fold(state, event))
        return made[-1]

    monkeypatch.setattr(context, "evolve", counted)
    before = log.state
    applied = at_once(run.run(log, NARRATOR, cmd.ApplyCondition("k", "custom")))
    assert applied is not None
    assert folded == list(applied.events)
    assert all(kept is state for kept, state in zip(applied.states[1:], made, strict=True))
    assert applied.states[0] is before
    assert applied.after is log.state
    state = before
    for event, after in zip(applied.events, applied.states[1:], strict=True):
        state = fold(state, event)
        assert (after, after.seq, after.undo) == (state, state.seq, state.undo)


def test_a_command_whose_before_hooks_took_long_records_the_time_of_its_commit() -> None:
    """A decision made ahead of the before hooks carries the time it was made; hooks that take
    longer than ``KEPT_FOR`` have it made again, so a turn started by the command starts when
    it is committed, not when its hooks began."""

    class Slow:
        @hookimpl
        def before_action_declared(self, combatant: Any) -> None:
            table.now += 2.0  # the hook's whole budget, and more, on the table's clock

    table = Table("dnd3e", {"slow": Slow()}, seed=1)
    table.add("a", init_mod=2)
    table.add("b")
    table.start()
    turn = table.turn()
    begun = table.now
    events = table.do(cmd.DeclareAction(turn, ActionSpec("attack")))
    recorded = [e for e in events if isinstance(e, ev.CommandRecorded)]
    assert [e.at for e in recorded] == [begun + 2.0]
