"""The plugin host in process: each implementation called alone with its own budget and error
handling, failing plugins disabled per combat, proposals applied as the plugin's commands.

The same host runs inside the daemon; tests/test_daemon_plugins.py proves it there, against a
real process.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from dataclasses import replace
from typing import Any

import anyio
import pytest

from turnkeeper_engine import BUNDLED_RULES, NARRATOR, SeededDice
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine.decide import MAX_DISABLED_PLUGINS
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger
from turnkeeper_engine.pipeline import Applied, MemoryLog, Pipeline, at_once
from turnkeeper_sdk import CheckAdjustment, hookimpl
from turnkeeper_sdk.hookspecs import HOOKS, REGISTRATION_HOOKS
from turnkeeper_sdk.plugins import (
    _AFTER,
    _BEFORE,
    MAX_CHAIN,
    MAX_PROPOSALS,
    PluginHost,
    _hook_calls,
)
from turnkeeper_sdk.testing import Table


class Recorder:
    """Remembers every hook it sees, with the arguments it asked for."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    @hookimpl
    def on_combat_start(self, event: ev.CombatStarted) -> None:
        self.seen.append(("combat_start", event.order))

    @hookimpl
    def on_round_start(self, round: int) -> None:
        self.seen.append(("round_start", round))

    @hookimpl
    def on_turn_start(self, combatant: Any) -> None:
        self.seen.append(("turn_start", combatant.id))

    @hookimpl
    def on_turn_end(self, combatant: Any) -> None:
        self.seen.append(("turn_end", combatant.id))

    @hookimpl
    def on_round_end(self, round: int) -> None:
        self.seen.append(("round_end", round))

    @hookimpl
    def on_combat_end(self) -> None:
        self.seen.append(("combat_end", None))


class Raises:
    @hookimpl
    def on_turn_start(self) -> None:
        raise RuntimeError("boom")


class Sleeps:
    @hookimpl
    async def on_turn_start(self) -> None:
        await anyio.sleep(5)


class Blocks:
    @hookimpl
    def on_turn_start(self) -> None:
        time.sleep(0.3)


def _three(table: Table) -> None:
    for name in ("a", "b", "c"):
        table.add(name, init_mod=3 - ord(name) + ord("a"))


def test_hooks_fire_once_per_real_transition_in_order() -> None:
    """R5: turn and round hooks follow the turn_started/turn_ended events, exactly once."""
    rec = Recorder()
    table = Table("dnd3e", {"rec": rec}, seed=3)
    _three(table)
    table.start()
    order = table.state.order
    for _ in range(8):
        table.end_turn()
    table.do(cmd.EndCombat())
    assert rec.seen[0] == ("combat_start", order)
    assert rec.seen[1] == ("round_start", 1)
    turns = [(k, v) for k, v in rec.seen if k in ("turn_start", "turn_end")]
    expected = []
    for _ in range(2):
        for c in order:
            expected += [("turn_start", c), ("turn_end", c)]
    expected.append(("turn_start", order[0]))
    assert turns[: len(expected)] == expected
    assert ("round_end", 1) in rec.seen
    assert ("round_start", 2) in rec.seen
    assert rec.seen[-1] == ("combat_end", None)
    assert rec.seen.count(("round_start", 2)) == 1


@pytest.mark.parametrize(
    ("plugin", "reason"),
    [
        (Raises(), "RuntimeError: boom"),
        (Sleeps(), "timeout after 50 ms"),
        (Blocks(), "still running"),
    ],
    ids=["raises", "times-out", "overruns-in-its-thread"],
)
def test_a_failing_plugin_is_disabled_for_the_combat_and_the_others_go_on(
    plugin: object, reason: str
) -> None:
    rec = Recorder()
    table = Table("marvel", {"bad": plugin, "rec": rec}, seed=5)
    _three(table)
    table.start()
    for _ in range(5):
        table.end_turn()
    disabled = table.of(ev.PluginDisabled)
    assert [d.plugin for d in disabled] == ["bad"]
    assert disabled[0].reason.startswith("3 failures in a row of on_turn_start: ")
    assert reason in disabled[0].reason
    assert table.state.disabled_plugins == ("bad",)
    # Called three times, never again; the healthy plugin saw every turn.
    stats = table.host.stats["bad"]
    assert stats.calls == 3
    assert stats.disabled == 1
    assert len([s for s in rec.seen if s[0] == "turn_start"]) == 6
    # The disabling is recorded as the daemon's own command.
    recorded = [e for e in table.of(ev.CommandRecorded) if e.command == "disable_plugin"]
    assert [e.actor.via for e in recorded] == ["daemon"]


def test_an_async_hook_swallowing_its_cancellation_is_given_up_on_and_disabled() -> None:
    """It catches every cancellation and waits again, until the test lets it go: the host gives
    up at its budget, the table goes on without waiting for it, and the plugin is disabled."""
    released = threading.Event()
    swallowed = []

    class Swallows:
        @hookimpl
        async def on_turn_start(self) -> None:
            while not released.wait(0):
                try:
                    await anyio.sleep(0.01)
                except anyio.get_cancelled_exc_class():
                    swallowed.append(1)

    rec = Recorder()
    # Four times the default budget: the recorder's quick calls must never be given up on
    # because a loaded machine was slow to schedule its thread (that too would leave a call
    # held), while the swallowing one still is, in a second or so.
    table = Table("marvel", {"swallows": Swallows(), "rec": rec}, seed=5, budget=0.2)
    _three(table)
    try:
        table.start()
        for _ in range(3):
            table.end_turn()
        # Still running: nothing waited for it.
        held = [(call.plugin, call.hook) for call in table.host.held()]
        assert held == [("swallows", "on_turn_start")]
    finally:
        released.set()
    (disabled,) = table.of(ev.PluginDisabled)
    assert disabled.plugin == "swallows"
    assert "still running" in disabled.reason
    assert swallowed
    assert len([s for s in rec.seen if s[0] == "turn_start"]) == 4


def test_a_call_a_little_late_in_one_combat_costs_another_combat_nothing() -> None:
    """Given up on at its budget in combat a, the late call ends soon after: combat b's call
    waits for the plugin's thread and succeeds, rather than failing (and counting towards
    disabling a sound plugin there)."""

    class LateOnce:
        def __init__(self) -> None:
            self.calls = 0

        @hookimpl
        def on_round_start(self, round: int) -> None:
            self.calls += 1
            if self.calls == 1:
                time.sleep(0.3)

    host = PluginHost(budget=0.2, report=lambda what, **details: None)
    host.register(LateOnce(), "late")

    async def both() -> list[Any]:
        await host.call("on_round_start", "a", (), round=1)
        return await host.call("on_round_start", "b", (), round=1)

    outcomes = anyio.run(both)
    assert [o.plugin for o in outcomes] == ["late"]
    stats = host.stats["late"]
    assert (stats.calls, stats.blocked) == (2, 1)


def test_a_disabled_plugin_can_be_enabled_again_by_the_narrator() -> None:
    table = Table("marvel", {"bad": Raises()}, seed=5)
    _three(table)
    table.start()
    for _ in range(3):
        table.end_turn()
    assert table.state.disabled_plugins == ("bad",)
    table.do(cmd.EnablePlugin("bad"))
    assert table.state.disabled_plugins == ()
    before = table.host.stats["bad"].calls
    table.end_turn()
    assert table.host.stats["bad"].calls == before + 1


def test_enabling_a_plugin_again_resets_its_failure_count() -> None:
    """Two failures, then the narrator disables and enables it: the count starts over."""
    table = Table("marvel", {"bad": Raises()}, seed=5)
    _three(table)
    table.start()
    table.end_turn()
    assert table.host.stats["bad"].errors == 2
    table.do(cmd.DisablePlugin("bad", "by hand"))
    table.do(cmd.EnablePlugin("bad"))
    table.end_turn()
    table.end_turn()
    assert [d.reason for d in table.of(ev.PluginDisabled)] == ["by hand"]
    table.end_turn()
    assert len(table.of(ev.PluginDisabled)) == 2


def test_one_failure_then_success_resets_the_streak() -> None:
    calls = {"n": 0}

    class Flaky:
        @hookimpl
        def on_turn_start(self) -> None:
            calls["n"] += 1
            if calls["n"] % 2:
                raise ValueError("odd")

    table = Table("marvel", {"flaky": Flaky()}, seed=5)
    _three(table)
    table.start()
    for _ in range(8):
        table.end_turn()
    assert table.of(ev.PluginDisabled) == []
    assert table.host.stats["flaky"].errors == 5


def test_a_hook_that_always_fails_is_counted_alone_whatever_its_other_hooks_do() -> None:
    """The plugin's on_turn_end succeeds between its failing on_turn_starts: still disabled."""

    class HalfBroken:
        @hookimpl
        def on_turn_start(self) -> None:
            raise RuntimeError("always")

        @hookimpl
        def on_turn_end(self) -> None:
            return None

    table = Table("marvel", {"half": HalfBroken()}, seed=5)
    _three(table)
    table.start()
    for _ in range(4):
        table.end_turn()
    (disabled,) = table.of(ev.PluginDisabled)
    assert disabled.reason == "3 failures in a row of on_turn_start: RuntimeError: always"
    assert table.host.stats["half"].errors == 3


def test_a_plugin_failing_too_often_is_not_called_again_within_the_same_command() -> None:
    """start_combat asks every combatant's check: after three failures the rest go without."""

    class BadCheck:
        @hookimpl
        def before_initiative_check(self) -> None:
            raise RuntimeError("no check")

    table = Table("marvel", {"bad": BadCheck()}, seed=5)
    for n in range(6):
        table.add(f"c{n}")
    table.start()
    assert table.host.stats["bad"].calls == 3
    (disabled,) = table.of(ev.PluginDisabled)
    assert (
        disabled.reason == "3 failures in a row of before_initiative_check: RuntimeError: no check"
    )
    assert len(table.named("initiative_rolled")) == 6


def test_plugin_commands_are_recorded_with_the_plugins_name_r16() -> None:
    class Timer:
        @hookimpl
        def on_turn_start(self, combat: Any, combatant: Any) -> cmd.Command | None:
            if combat.round == 1 and combatant.id == "a":
                return cmd.ApplyCondition(combatant.id, "custom", note="focused")
            return None

    table = Table("dnd3e", {"timer": Timer()}, seed=1)
    _three(table)
    table.start()
    for _ in range(2):
        table.end_turn()
    assert table.by("timer") == ["apply_condition"]
    recorded = [e for e in table.of(ev.CommandRecorded) if e.command == "apply_condition"]
    assert recorded[0].actor.role == "narrator"
    assert table.view.conditions_on("a")[0].note == "focused"


def test_a_refused_proposal_is_counted_and_the_rest_still_apply() -> None:
    class Mixed:
        @hookimpl
        def on_combat_start(self) -> list[cmd.Command]:
            return [
                cmd.DefeatCombatant("nobody"),
                cmd.ApplyCondition("b", "custom", note="marked"),
            ]

    table = Table("dnd3e", {"mixed": Mixed()}, seed=1)
    _three(table)
    table.start()
    assert table.host.stats["mixed"].refused == 1
    refused = [d for what, d in table.problems if what == "plugin_command_refused"]
    assert refused[0]["code"] == "unknown_combatant"
    assert refused[0]["field"] == "combatant"
    assert table.by("mixed") == ["apply_condition"]


def test_a_hook_returning_junk_or_too_many_commands_is_reported() -> None:
    class Junk:
        @hookimpl
        def on_combat_start(self) -> list[Any]:
            return ["not a command"]

        @hookimpl
        def on_round_start(self) -> list[cmd.Command]:
            return [cmd.ApplyCondition("a", "custom")] * (MAX_PROPOSALS + 5)

    table = Table("dnd3e", {"junk": Junk()}, seed=1)
    _three(table)
    table.start()
    assert len(table.by("junk")) == MAX_PROPOSALS
    bad = [d for what, d in table.problems if what == "plugin_bad_proposal"]
    assert len(bad) == 2


def test_plugins_answering_each_other_are_cut_off_at_the_chain_limit() -> None:
    class Echo:
        @hookimpl
        def on_condition_applied(self, condition: Any) -> cmd.Command:
            return cmd.ApplyCondition(condition.target, "custom", note="again")

    table = Table("dnd3e", {"echo": Echo()}, seed=1)
    _three(table)
    table.start()
    table.do(cmd.ApplyCondition("a", "custom", note="first"))
    assert len(table.by("echo")) == MAX_CHAIN + 1
    assert any(what == "plugin_chain_cut" for what, _ in table.problems)


def test_r8_before_combat_start_marks_surprise_before_the_check() -> None:
    """A plugin's mark_surprised lands before start_combat rolls: the trouble is on the check
    and the combatant has no bonus-round turn (R8)."""

    class Ambush:
        @hookimpl
        def before_combat_start(self, combat: Any) -> list[cmd.Command]:
            return [cmd.MarkSurprised(c.id) for c in combat.active() if "unaware" in c.tags]

    table = Table("marvel", {"ambush": Ambush()}, seed=2)
    table.add("guard", tags=("unaware",))
    table.add("hero")
    table.start()
    names = [e.name for e in table.events]
    assert names.index("surprise_marked") < names.index("initiative_rolled")
    checks = {e.combatant: e.check for e in table.of(ev.InitiativeRolled)}
    assert checks["guard"].troubles == 1
    assert checks["hero"].troubles == 0
    assert table.by("ambush") == ["mark_surprised"]


def test_r3_before_initiative_check_adjustments_add_up_across_plugins() -> None:
    class Edge:
        @hookimpl
        def before_initiative_check(self, combatant: Any) -> CheckAdjustment | None:
            return CheckAdjustment(edges=1, reason="keen") if combatant.id == "a" else None

    class Trouble:
        @hookimpl
        def before_initiative_check(self, combatant: Any) -> CheckAdjustment:
            return CheckAdjustment(troubles=1, reason="dazed")

    table = Table("marvel", {"edge": Edge(), "trouble": Trouble()}, seed=4)
    table.add("a")
    table.add("b")
    table.do(cmd.RollInitiative("b"))
    table.start()
    checks = {e.combatant: e.check for e in table.of(ev.InitiativeRolled)}
    assert (checks["a"].edges, checks["a"].troubles) == (1, 1)
    # An explicit roll gets the adjustment too, inside the client's own command.
    assert (checks["b"].edges, checks["b"].troubles) == (0, 1)
    rolls = [e.actor.via for e in table.of(ev.CommandRecorded) if e.command == "roll_initiative"]
    assert rolls == [None, "plugin:trouble+edge"] or rolls == [None, "plugin:edge+trouble"]


def test_r12_a_plugin_claims_only_for_combatants_that_handed_it_their_reactions() -> None:
    class Claimer:
        @hookimpl
        def on_trigger(self, window: Any, offered: Any) -> list[cmd.Command]:
            return [cmd.ClaimReaction(window.id, r.combatant, r.id) for r in offered]

    table = Table("marvel", {"claimer": Claimer()}, seed=6)
    table.add("bot", tags=("auto",))
    table.add("human", controller="ana")
    table.add("villain", init_mod=-5)
    table.do(cmd.OrderTies(("bot", "human")))
    table.start()
    predicate = Predicate(actors=("villain",), kinds=("attack",))
    reserved: set[str] = set()
    for _ in range(8):
        turn = table.turn()
        if turn.combatant == "villain" and len(reserved) == 2:
            table.do(cmd.DeclareAction(turn, ActionSpec("attack", targets=("bot",))))
            break
        if (
            turn.round >= 1
            and turn.combatant in ("bot", "human")
            and turn.combatant not in reserved
        ):
            table.do(
                cmd.Reserve(
                    turn,
                    "standard",
                    ActionSpec("attack", targets=("villain",)),
                    Trigger("when the villain attacks", predicate),
                )
            )
            reserved.add(turn.combatant)
        table.end_turn()
    claims = table.of(ev.ReactionClaimed)
    assert [c.claim.combatant for c in claims] == ["bot"]
    assert table.host.stats["claimer"].refused == 1
    refused = [d for what, d in table.problems if what == "plugin_command_refused"]
    assert refused[0]["code"] == "not_delegated"


def test_a_plugin_taking_an_argument_no_hook_declares_is_refused_at_load() -> None:
    class Wrong:
        @hookimpl
        def on_turn_start(self, combatant: Any, mood: str) -> None: ...

    host = PluginHost()
    assert host.register(Wrong(), "wrong") is None
    assert host.failures[0].name == "wrong"
    assert "mood" in host.failures[0].error


def test_misspelled_and_unmarked_hooks_are_reported() -> None:
    class Typos:
        @hookimpl
        def on_turn_strat(self) -> None: ...

        def on_round_start(self) -> None: ...

    host = PluginHost(report=lambda *a, **k: None)
    info = host.register(Typos(), "typos")
    assert info is not None
    assert info.unknown_hooks == (
        "on_round_start (not marked with @hookimpl)",
        "on_turn_strat (did you mean on_turn_start?)",
    )
    assert info.hooks == ()


# ------------------------------------------------------------- what a plugin can get wrong


class Helpful:
    """A well-behaved plugin beside a misbehaving one: its proposal must still land."""

    @hookimpl
    def on_combat_start(self) -> cmd.Command:
        return cmd.ApplyCondition("a", "custom", note="helpful")


def _started(plugins: dict[str, object], ruleset: str = "dnd3e") -> Table:
    table = Table(ruleset, {**plugins, "helpful": Helpful()}, seed=1)
    _three(table)
    table.start()
    return table


def test_a_malformed_proposal_is_refused_before_it_reaches_the_log() -> None:
    """A value the log could not replay (a tuple in record_outcome's values) is refused as the
    wire would refuse it, counted against the plugin; the others' proposals still apply."""

    class Malformed:
        @hookimpl
        def on_combat_start(self) -> list[cmd.Command]:
            return [
                cmd.RecordOutcome("k", "t", None, (("v", (1, 2)),)),  # type: ignore[arg-type]
                cmd.RecordOutcome(None, "t"),  # type: ignore[arg-type]
            ]

    table = _started({"malformed": Malformed()})
    assert table.host.stats["malformed"].refused == 2
    refused = [d for what, d in table.problems if what == "plugin_command_refused"]
    assert {d["code"] for d in refused} == {"invalid_params"}
    assert table.named("outcome_recorded") == []
    assert table.by("helpful") == ["apply_condition"]


def test_a_generator_is_consumed_within_the_budget_and_its_error_is_the_plugins() -> None:
    class Generates:
        @hookimpl
        def on_combat_start(self) -> Any:
            yield cmd.ApplyCondition("b", "custom")
            raise ValueError("half way")

        @hookimpl
        def on_round_start(self) -> Any:
            while True:  # never ends: only what could be used is taken
                yield cmd.ApplyCondition("c", "custom")

    table = _started({"generates": Generates()})
    assert table.host.stats["generates"].errors == 1
    assert table.by("helpful") == ["apply_condition"]
    # The endless one gave the most a hook may propose, and was reported for more.
    assert len(table.by("generates")) == MAX_PROPOSALS
    bad = [d for what, d in table.problems if what == "plugin_bad_proposal"]
    assert len(bad) == 1


@pytest.mark.parametrize("raised", [KeyboardInterrupt, GeneratorExit, asyncio.CancelledError])
def test_no_exception_from_a_plugin_escapes_not_even_a_base_exception(raised: type) -> None:
    class Raises:
        @hookimpl
        def on_combat_start(self) -> None:
            raise raised()

    table = _started({"raises": Raises()})
    assert table.host.stats["raises"].errors == 1
    assert table.by("helpful") == ["apply_condition"]


def test_r16_a_refused_start_runs_no_before_hook() -> None:
    """An observer's start_combat is refused by the engine: no plugin may roll or mark anyone
    surprised for it first."""
    from turnkeeper_engine import Actor as EngineActor
    from turnkeeper_sdk.plugins import RefusedError

    calls: list[str] = []

    class Ambush:
        @hookimpl
        def before_combat_start(self) -> cmd.Command:
            calls.append("before_combat_start")
            return cmd.MarkSurprised("a")

        @hookimpl
        def before_initiative_check(self) -> CheckAdjustment:
            calls.append("before_initiative_check")
            return CheckAdjustment(edges=1)

    table = Table("marvel", {"ambush": Ambush()}, seed=1)
    _three(table)
    with pytest.raises(RefusedError) as refused:
        table.do(cmd.StartCombat(), EngineActor("observer", "o1"))
    assert refused.value.code == "forbidden"
    assert calls == []
    assert table.state.phase == "setup"


def test_r3_an_adjustment_the_engine_refuses_never_costs_the_client_its_roll() -> None:
    """dnd3e has no edges: the plugin's adjustment is refused and counted against it, and the
    client's roll goes ahead as asked."""

    class DangerSense:
        @hookimpl
        def before_initiative_check(self) -> CheckAdjustment:
            return CheckAdjustment(edges=1, reason="Danger Sense")

    table = Table("dnd3e", {"danger-sense": DangerSense()}, seed=1)
    table.add("a")
    table.do(cmd.RollInitiative("a"))
    assert len(table.of(ev.InitiativeRolled)) == 1
    assert table.host.stats["danger-sense"].refused == 1


def test_a_broad_chain_is_cut_by_the_commands_one_command_may_cause() -> None:
    from turnkeeper_sdk.plugins import MAX_CAUSED

    class Fan:
        @hookimpl
        def on_condition_applied(self, condition: Any) -> list[cmd.Command]:
            return [cmd.ApplyCondition(condition.target, "custom")] * 3

    table = Table("dnd3e", {"fan": Fan()}, seed=1)
    _three(table)
    table.start()
    table.do(cmd.ApplyCondition("a", "custom"))
    assert len(table.by("fan")) == MAX_CAUSED
    assert table.state.disabled_plugins == ("fan",)


def test_plugin_properties_are_not_run_at_load_and_names_are_bounded() -> None:
    class Touchy:
        @property
        def on_turn_start(self) -> Any:
            raise RuntimeError("touched")

        @hookimpl
        def on_round_start(self) -> None: ...

    host = PluginHost(report=lambda *a, **k: None)
    info = host.register(Touchy(), "touchy")
    assert info is not None
    assert info.hooks == ("on_round_start",)
    assert host.register(Helpful(), "a+b") is None
    assert host.register(Helpful(), "x" * 129) is None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_table_steps_on_an_async_tests_own_loop() -> None:
    class Counts:
        def __init__(self) -> None:
            self.turns = 0

        @hookimpl
        async def on_turn_start(self) -> None:
            await anyio.sleep(0)
            self.turns += 1

    counts = Counts()
    table = Table("dnd3e", {"counts": counts}, seed=1)
    for name in ("a", "b"):
        await table.ado(cmd.AddCombatant(name, name))
    await table.ado(cmd.StartCombat())
    await table.ado(cmd.EndTurn(table.turn()))
    assert counts.turns == 2


def test_a_plugin_disabled_is_not_called_for_hooks_already_due() -> None:
    """Five conditions land in one go; the plugin failing on each is disabled at the third,
    and the hooks of the last two (committed before the disabling) no longer call it."""

    class Five:
        @hookimpl
        def on_combat_start(self) -> list[cmd.Command]:
            return [cmd.ApplyCondition("a", "custom", note=str(i)) for i in range(5)]

    class FailsOnConditions:
        @hookimpl
        def on_condition_applied(self) -> None:
            raise RuntimeError("no")

    table = Table("dnd3e", {"five": Five(), "fails": FailsOnConditions()}, seed=1)
    _three(table)
    table.start()
    assert len(table.named("condition_applied")) == 5
    assert table.state.disabled_plugins == ("fails",)
    assert table.host.stats["fails"].calls == 3


def test_before_action_declared_runs_only_for_a_declaration_the_engine_accepts() -> None:
    seen: list[str] = []

    class Watches:
        @hookimpl
        def before_action_declared(self, combatant: Any, action: Any) -> cmd.Command:
            seen.append(f"{combatant.id}:{action.kind}")
            return cmd.RecordOutcome("watch", f"{combatant.id} is about to {action.kind}")

    from turnkeeper_sdk.plugins import RefusedError

    table = Table("dnd3e", {"watches": Watches()}, seed=1)
    _three(table)
    table.start()
    turn = table.turn()
    with pytest.raises(RefusedError):
        table.do(cmd.DeclareAction(turn, ActionSpec("juggle")))  # not in the catalogue
    assert seen == []
    events = table.do(cmd.DeclareAction(turn, ActionSpec("attack")))
    assert seen == [f"{turn.combatant}:attack"]
    names = [e.name for e in events]
    assert names.index("outcome_recorded") < names.index("action_declared")


def test_r5_the_turn_a_hook_is_given_names_the_current_turn() -> None:
    """A plugin ending a turn from on_turn_start names it with the turn it was given."""

    class Hurries:
        @hookimpl
        def on_turn_start(self, turn: Any, combatant: Any) -> cmd.Command | None:
            return cmd.EndTurn(turn.ref) if combatant.id == "b" else None

    table = Table("dnd3e", {"hurries": Hurries()}, seed=1)
    _three(table)
    table.start()
    while table.state.round == 1:
        table.end_turn()
    # Every turn of b's that started was ended by the plugin, none refused as stale.
    started = [e.round for e in table.of(ev.TurnStarted) if e.combatant == "b"]
    assert table.by("hurries") == ["end_turn"] * len(started)
    assert table.host.stats["hurries"].refused == 0
    assert [e.round for e in table.of(ev.TurnEnded) if e.combatant == "b"] == started


WAIT_SECONDS = 20.0
"""How long a test waits for a plugin's thread to act, on a busy machine."""


class Keeps:
    """Ties what it makes to its loop and its thread in the first call and counts on both in
    every later one: a lock and a queue of its loop, a task of its own that works between
    calls, a sqlite3 connection (usable only in the thread that opened it)."""

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[threading.Thread] = []
        self.lock: asyncio.Lock | None = None
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.handled: list[int] = []
        self.worked = threading.Event()
        self.cancelled = threading.Event()
        self.db: sqlite3.Connection | None = None
        self.counted: list[int] = []
        self.task: asyncio.Task[None] | None = None

    async def _work(self) -> None:
        try:
            while True:
                self.handled.append(await self.queue.get())
                await asyncio.sleep(0.01)  # runs only while the loop does
                self.worked.set()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    @hookimpl
    async def on_turn_start(self, combatant: Any) -> None:
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.current_thread())
        if self.lock is None:
            self.lock = asyncio.Lock()
            self.task = asyncio.get_running_loop().create_task(self._work())
        async with self.lock:
            await self.queue.put(len(self.loops))

    @hookimpl
    def on_turn_end(self) -> None:
        self.threads.append(threading.current_thread())
        if self.db is None:
            self.db = sqlite3.connect(":memory:")
            self.db.execute("create table turns (n)")
        self.db.execute("insert into turns values (1)")
        self.counted.append(self.db.execute("select count(*) from turns").fetchone()[0])


def test_an_async_plugins_loop_and_thread_serve_all_its_calls_and_run_between_them() -> None:
    """What a plugin ties to its loop or its thread in one call serves the next: its hooks run
    on one loop and one thread for the host's life, and that loop runs between calls, so a
    task it started goes on working. Its thread ends, its tasks cancelled, when the host
    stops."""
    keeps = Keeps()
    table = Table("marvel", {"keeps": keeps}, seed=5)
    _three(table)
    table.start()
    # No call is under way: the task works all the same.
    assert keeps.worked.wait(WAIT_SECONDS)
    for _ in range(3):
        keeps.worked.clear()
        table.end_turn()
        assert keeps.worked.wait(WAIT_SECONDS)
        time.sleep(0.1)  # a pause between calls costs nothing
    assert table.problems == []
    assert keeps.handled == [1, 2, 3, 4]
    assert len(keeps.loops) == 4
    assert all(loop is keeps.loops[0] for loop in keeps.loops)
    assert len(keeps.threads) == 7
    assert all(t is keeps.threads[0] for t in keeps.threads)
    assert keeps.counted == [1, 2, 3]
    table.host.stop()
    keeps.threads[0].join(WAIT_SECONDS)
    assert not keeps.threads[0].is_alive()
    assert keeps.cancelled.is_set()
    assert keeps.loops[0].is_closed()


def test_a_failing_plugin_whose_disabling_is_refused_is_not_called_again_in_that_combat() -> None:
    """The narrator has disabled as many plugins as a combat may: the host's disable_plugin for
    a failing one is refused, and the host stops calling it there all the same (and says so);
    another combat still calls it."""
    rec = Recorder()
    table = Table("marvel", {"bad": Raises(), "rec": rec}, seed=5)
    _three(table)
    for i in range(MAX_DISABLED_PLUGINS):
        table.do(cmd.DisablePlugin(f"other-{i}"))
    table.start()
    for _ in range(5):
        table.end_turn()
    assert "bad" not in table.state.disabled_plugins
    assert not [e for e in table.of(ev.CommandRecorded) if e.actor.via == "daemon"]
    stats = table.host.stats["bad"]
    assert (stats.calls, stats.errors, stats.disabled) == (3, 3, 1)
    assert len([s for s in rec.seen if s[0] == "turn_start"]) == 6
    (said,) = [d for what, d in table.problems if what == "plugin_disabled"]
    assert (said["plugin"], said["recorded"], said["code"]) == (
        "bad",
        False,
        "too_many_plugins_disabled",
    )

    async def elsewhere() -> None:
        await table.host.call("on_turn_start", "elsewhere", (), combatant=table.state.combatants[0])

    anyio.run(elsewhere)
    assert stats.calls == 4


def test_a_base_exception_from_a_task_of_the_plugins_own_leaves_its_loop_serving() -> None:
    """A task the plugin started raises SystemExit, which asyncio lets out of its loop: the
    plugin's thread runs the loop again, and its later calls are served as before."""

    class Exits:
        def __init__(self) -> None:
            self.calls = 0
            self.task: asyncio.Task[None] | None = None

        async def _exit(self) -> None:
            raise SystemExit(3)

        @hookimpl
        async def on_turn_start(self) -> None:
            self.calls += 1
            if self.calls == 1:
                self.task = asyncio.get_running_loop().create_task(self._exit())

    exits = Exits()
    table = Table("marvel", {"exits": exits}, seed=5)
    _three(table)
    table.start()
    for _ in range(3):
        table.end_turn()
    assert exits.calls == 4
    assert table.problems == []
    assert exits.task is not None
    assert isinstance(exits.task.exception(), SystemExit)


def _a_game() -> list[Applied]:
    """What a short game applies: combatants, a condition, turns with actions, rounds."""
    log = MemoryLog()
    run = Pipeline(SeededDice(3), lambda: 1_000.0, rules=BUNDLED_RULES).run
    applied: list[Applied] = []

    def do(command: cmd.Command) -> None:
        done = at_once(run(log, NARRATOR, command))
        if done is not None:
            applied.append(done)

    # Windows wait for answers, so each declared action opens one, closed by the next command.
    for command in [
        cmd.CreateCombat("t", "marvel", (("window_deadline", 5.0),)),
        cmd.AddCombatant("a", "A", init_mod=2),
        cmd.AddCombatant("b", "B", init_mod=1),
        cmd.ApplyCondition("a", "custom"),
        cmd.StartCombat(),
    ]:
        do(command)
    for _ in range(3):
        turn = log.state.turn
        assert turn is not None
        do(cmd.DeclareAction(turn.ref, ActionSpec("attack")))
        window = log.state.window
        assert window is not None
        assert window.status == "open"
        do(cmd.CloseWindow(window.id))
        do(cmd.EndTurn(turn.ref))
    do(cmd.EndCombat())
    return applied


AFTER_HOOKS = sorted({h for hooks in _AFTER.values() for h in hooks})


@pytest.mark.parametrize("hook", AFTER_HOOKS)
def test_a_command_is_due_for_after_hooks_whenever_a_loaded_hook_stands_for_it(hook: str) -> None:
    """``after_due`` lets a host skip a command's after hooks: never one a loaded plugin's hook
    is called for, whichever hook it is."""
    host = PluginHost()
    host.register(type("One", (), {hook: hookimpl(lambda self: None)})(), "one")
    game = _a_game()
    called = [a for a in game if any(h == hook for h, _ in _hook_calls(a, BUNDLED_RULES))]
    assert called, f"the game never calls {hook}: it proves nothing for it"
    assert all(host.after_due(a) for a in called)
    assert not all(host.after_due(a) for a in game)


def test_every_per_command_hook_comes_before_or_after_a_command() -> None:
    """A hookspec neither before a command nor after one would never be called, and a host
    asking ``after_due`` would skip it."""
    before = {h for hooks in _BEFORE.values() for h in hooks}
    assert set(HOOKS) - REGISTRATION_HOOKS - before == set(AFTER_HOOKS)


def test_a_command_no_hook_stands_for_is_not_due_unless_the_host_has_work_in_its_combat() -> None:
    host = PluginHost()
    host.register(type("Turns", (), {"on_turn_start": hookimpl(lambda self: None)})(), "turns")
    game = _a_game()
    quiet = [a for a in game if not _hook_calls(a, BUNDLED_RULES)]
    assert quiet
    assert not any(host.after_due(a) for a in quiet)
    # A plugin failed too often in the combat: the next command's after hooks disable it.
    host._due_off[("t", "turns")] = "failed"
    assert all(host.after_due(a) for a in quiet)
    host.failing("t")
    # A plugin enabled again, and the combat's end, are the host's to see.
    enabled = replace(quiet[-1], events=(ev.PluginEnabled("turns"),))
    assert host.after_due(enabled)
    ended = replace(
        quiet[-1], states=(*quiet[-1].states[:-1], replace(quiet[-1].after, phase="ended"))
    )
    assert host.after_due(ended)
