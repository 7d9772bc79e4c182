"""R5 Turns and rounds: one turn each, explicit ends, stale turns, transitions emitted once."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daemon import running
from story import OBSERVER, Story, faces, names, of, player
from turnkeeper_engine import State, evolve
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Trigger, TriggerFacts, TurnRef

RULESETS = ("marvel", "dnd3e")
TRANSITIONS = ("turn_started", "turn_ended", "round_started", "round_ended")


def combat(ruleset: str, **options: object) -> Story:
    """ann's a (15), the narrator's b (10) and bob's c (5), started: a's turn, round 1."""
    s = Story(ruleset, **options)
    for combatant_id, user, total in (("a", "ann", 15), ("b", None, 10), ("c", "bob", 5)):
        s.add(combatant_id, controller=user, player_character=user is not None)
        s.roll(combatant_id, *faces(ruleset, total))
    s.do(c.StartCombat())
    assert (s.state.round, s.current) == (1, "a")
    return s


def transitions(events: list[ev.Event]) -> list[str]:
    return [n for n in names(events) if n in TRANSITIONS]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_each_active_combatant_gets_exactly_one_turn_per_round_in_order(ruleset: str) -> None:
    s = combat(ruleset)
    for _ in range(3):
        assert s.run_round() == ["a", "b", "c"]
    per_round: dict[int, list[str]] = {}
    for e in of(s.log, ev.TurnStarted):
        per_round.setdefault(e.round, []).append(e.combatant)
    assert per_round == {1: ["a", "b", "c"], 2: ["a", "b", "c"], 3: ["a", "b", "c"], 4: ["a"]}


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_revived_after_its_turn_takes_no_second_turn_that_round(ruleset: str) -> None:
    s = combat(ruleset)
    s.end_turn()
    assert s.current == "b"
    s.do(c.DefeatCombatant("a"))
    revived = s.do(c.ReviveCombatant("a"))
    assert transitions(revived) == []
    assert s.current == "b"
    s.end_turn()
    ended = s.end_turn()
    assert of(ended, ev.RoundStarted)[0].round == 2
    assert [e.combatant for e in of(s.log, ev.TurnStarted) if e.round == 1] == ["a", "b", "c"]
    assert s.current == "a"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_revived_after_its_slot_passed_acts_next_round_in_order(ruleset: str) -> None:
    s = combat(ruleset)
    s.do(c.DefeatCombatant("b"))
    s.end_turn()
    assert s.current == "c"
    s.do(c.ReviveCombatant("b"))  # its slot, between a and c, has passed this round
    ended = s.end_turn()
    # Turns go in order: b does not act after c in round 1; it is back in round 2.
    assert [e.round for e in of(ended, ev.RoundStarted)] == [2]
    assert [e.combatant for e in of(s.log, ev.TurnStarted) if e.round == 1] == ["a", "c"]
    assert s.run_round() == ["a", "b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_a_late_arrival_never_takes_two_turns_in_a_round(ruleset: str) -> None:
    s = combat(ruleset)
    s.dice.push(*faces(ruleset, 18))
    s.add("x")  # slots ahead of a, whose turn it is: its slot has passed
    assert s.state.order == ("x", "a", "b", "c")
    assert s.run_round() == ["a", "b", "c"]
    assert s.run_round() == ["x", "a", "b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_controller_or_narrator_ends_the_turn_nobody_else(ruleset: str) -> None:
    s = combat(ruleset)
    assert s.refuse(c.EndTurn(s.turn), player("bob")).code == "forbidden"
    assert s.refuse(c.EndTurn(s.turn), OBSERVER).code == "forbidden"
    ended = s.end_turn(player("ann"))
    assert [(e.combatant, e.reason) for e in of(ended, ev.TurnEnded)] == [("a", "ended")]
    assert s.current == "b"
    assert s.refuse(c.EndTurn(s.turn), player("ann")).code == "forbidden"
    s.end_turn()  # the narrator ends its own b's turn
    assert s.current == "c"
    s.end_turn()  # and may end anyone's
    assert (s.state.round, s.current) == (2, "a")


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_turn_ends_when_the_turn_timer_expires(ruleset: str) -> None:
    s = combat(ruleset, turn_time_limit=30.0)
    assert s.do(c.Tick(), now=5.0) == []
    warned = s.do(c.Tick(), now=29.0)
    assert names(warned) == ["turn_timer_warning"]
    assert s.current == "a"
    expired = s.do(c.Tick(), now=30.0)
    assert of(expired, ev.TurnTimerExpired)[0].combatant == "a"
    assert [(e.combatant, e.reason) for e in of(expired, ev.TurnEnded)] == [("a", "timer")]
    assert s.current == "b"


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("how", ["defeat", "remove"])
def test_r5_turn_ends_when_its_combatant_is_defeated_or_removed(ruleset: str, how: str) -> None:
    s = combat(ruleset)
    command = c.DefeatCombatant("a") if how == "defeat" else c.RemoveCombatant("a")
    out = s.do(command)
    reason = "defeated" if how == "defeat" else "removed"
    assert [(e.combatant, e.reason) for e in of(out, ev.TurnEnded)] == [("a", reason)]
    assert [e.combatant for e in of(out, ev.TurnStarted)] == ["b"]
    assert transitions(out) == ["turn_ended", "turn_started"]
    assert s.current == "b"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_double_end_turn_is_stale_turn(ruleset: str) -> None:
    s = combat(ruleset)
    first = TurnRef(1, "a")
    s.do(c.EndTurn(first), player("ann"))
    assert s.current == "b"
    error = s.refuse(c.EndTurn(first), player("ann"))
    assert (error.code, error.field) == ("stale_turn", "turn")
    error = s.refuse(c.EndTurn(first))
    assert (error.code, error.field) == ("stale_turn", "turn")
    # The second "next" skipped nobody: b's turn is still on.
    assert s.state.turn.named_by(TurnRef(1, "b"))
    assert s.run_round() == ["b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_a_turn_from_an_earlier_round_is_stale(ruleset: str) -> None:
    s = combat(ruleset)
    s.run_round()
    assert s.state.turn.named_by(TurnRef(2, "a"))
    assert s.refuse(c.EndTurn(TurnRef(1, "a"))).code == "stale_turn"
    assert s.refuse(c.EndTurn(TurnRef(2, "b"))).code == "stale_turn"
    assert s.refuse(c.EndTurn(TurnRef(3, "a"))).code == "stale_turn"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_every_turn_command_naming_a_past_turn_is_stale(ruleset: str) -> None:
    s = combat(ruleset)
    past = s.turn
    s.end_turn()
    stale = [
        c.DeclareAction(past, ActionSpec("attack", targets=("b",))),
        c.Hold(past),
        c.Reserve(past, "standard", ActionSpec("attack"), Trigger("b moves")),
    ]
    if ruleset == "dnd3e":
        stale.append(c.Refocus(past))
    for command in stale:
        assert s.refuse(command, player("ann")).code == "stale_turn", command.name
    assert s.state.turn.named_by(TurnRef(1, "b"))


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_a_command_for_the_turn_a_combatant_held_is_stale_in_its_held_turn(
    ruleset: str,
) -> None:
    """Found by the bots: a's held turn comes in the round a held in, so round and combatant
    alone name both turns; the turn's number tells them apart."""
    s = combat(ruleset)
    held = s.turn
    assert held.number == 1
    s.do(c.Hold(held))
    s.do(c.TakeHeldTurn("a", "after", "b"))
    assert s.current == "b"
    s.end_turn()
    assert (s.current, s.state.round) == ("a", 1)
    assert s.turn.number == 3
    error = s.refuse(c.EndTurn(held))
    assert (error.code, error.field) == ("stale_turn", "turn")
    # Round and combatant alone still name the current turn, as before numbers existed.
    s.do(c.EndTurn(TurnRef(1, "a")))
    assert s.current == "c"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_transition_events_exactly_once_per_real_transition(ruleset: str) -> None:
    s = combat(ruleset)
    assert transitions(s.end_turn()) == ["turn_ended", "turn_started"]
    assert transitions(s.end_turn()) == ["turn_ended", "turn_started"]
    across = s.end_turn()
    assert transitions(across) == ["turn_ended", "round_ended", "round_started", "turn_started"]
    assert [e.round for e in of(across, ev.RoundEnded)] == [1]
    assert [e.round for e in of(across, ev.RoundStarted)] == [2]
    for _ in range(5):
        s.end_turn()
    counts = {n: names(s.log).count(n) for n in TRANSITIONS}
    # Start: round 1, a. Eight turn ends: rounds 1 and 2 whole, then a and b of round 3.
    assert counts == {"turn_started": 9, "turn_ended": 8, "round_started": 3, "round_ended": 2}
    turns = [(e.round, e.combatant) for e in of(s.log, ev.TurnStarted)]
    assert len(turns) == len(set(turns))


def test_r5_bonus_round_to_round_1_transition_exactly_once() -> None:
    s = Story("marvel")
    s.add("fast")
    s.add("slow")
    s.roll("fast", 6, 5, 1)
    s.roll("slow", 3, 3, 3)
    started = s.do(c.StartCombat())
    assert transitions(started) == ["round_started", "turn_started"]
    across = s.end_turn()
    assert transitions(across) == ["turn_ended", "round_ended", "round_started", "turn_started"]
    assert [e.round for e in of(across, ev.RoundEnded)] == [0]
    assert [e.round for e in of(across, ev.RoundStarted)] == [1]
    assert s.current == "fast"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r5_no_transition_events_on_unrelated_commands(ruleset: str) -> None:
    s = combat(ruleset)
    turn = s.state.turn
    applied = s.do(c.ApplyCondition("b", "custom", note="prone"))
    assert transitions(applied) == []
    condition = of(applied, ev.ConditionApplied)[0].condition.id
    unrelated: list[c.Command] = [
        c.DeclareAction(s.turn, ActionSpec("move")),
        c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("b draws")),
        c.RemoveCondition(condition),
    ]
    for command in unrelated:
        assert transitions(s.do(command)) == [], command.name
    s.dice.push(*faces(ruleset, 4))
    assert transitions(s.add("late")) == []
    assert transitions(s.do(c.DefeatCombatant("c"))) == []
    assert transitions(s.do(c.ReviveCombatant("c"))) == []
    assert transitions(s.do(c.Tick(), now=100.0)) == []
    assert s.state.turn is not None
    assert (s.state.turn.round, s.state.turn.combatant) == (turn.round, turn.combatant)
    assert names(s.log).count("turn_started") == 1


def test_r5_turn_started_names_the_turns_number_and_old_events_without_it_fold_the_same() -> None:
    s = combat("marvel")
    s.end_turn()
    started = [e for e in s.log if isinstance(e, ev.TurnStarted)]
    assert [e.number for e in started] == [1, 2]
    assert started[-1].number == s.state.turn.number  # type: ignore[union-attr]
    # Events recorded before turn_started carried its number fold to the same state.
    old = State()
    for event in s.log:
        as_recorded = replace(event, number=None) if isinstance(event, ev.TurnStarted) else event
        old = evolve(old, as_recorded)
    assert old == s.state


# ------------------------------------------------------- the order of events in one transition

TRANSITION_ORDER = [
    "turn_ended",  # the turn ending...
    "condition_expired",  # ...and what ends with it (c's end)
    "round_ended",
    "round_started",
    "reservation_expired",  # a's start-of-turn bookkeeping...
    "reaction_refreshed",
    "condition_expired",  # ...what ends as its turn starts (a's start)...
    "turn_started",  # ...then the turn itself
]
"""Everything one command can set off between two turns, in the order protocol.md gives
(after its ``command_recorded``)."""


def test_r5_one_transition_tells_the_ending_turn_the_round_then_the_next_turns_start() -> None:
    s = combat("marvel")
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("if the door opens")))
    s.end_turn()
    announced = s.do(c.AnnounceTrigger(TriggerFacts("door", text="the door"), ("a",)))
    window = of(announced, ev.WindowOpened)[0].window
    s.do(c.ClaimReaction(window.id, "a", action=ActionSpec("attack", description="jumps")))
    s.do(c.FinishReaction(window.id, "a"))
    s.do(c.ApplyCondition("b", "custom", boundary="end", anchor="c"))
    s.do(c.ApplyCondition("c", "custom", boundary="start", anchor="a"))
    s.end_turn()
    events = s.end_turn()  # c ends the round; a's turn starts round 2
    assert names(events) == TRANSITION_ORDER
    ended, started = of(events, ev.ConditionExpired)
    assert (ended.combatant, started.combatant) == ("b", "c")


def test_r5_wire_one_transition_comes_in_the_documented_order(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        gm, watcher = d.client(), d.client()
        ids = itertools.count()

        def do(method: str, **params: Any) -> Any:
            return gm.call(method, combat="order", request_id=f"order-{next(ids)}", **params)

        def turn() -> dict[str, Any]:
            t = gm.call("get_combat", combat="order")["view"]["turn"]
            return {"round": t["round"], "combatant": t["combatant"], "number": t["number"]}

        gm.call("create_combat", request_id="order-create", combat_id="order", ruleset="marvel")
        for cid, dice in (("a", [5, 5, 5]), ("b", [3, 4, 5]), ("c", [2, 3, 4])):
            do("add_combatant", id=cid, display_name=cid.upper())
            do("roll_initiative", combatant=cid, faces=dice)
        do("start_combat")
        attack = {"kind": "attack"}
        do("reserve", turn=turn(), reserved_type="standard", action=attack, trigger={"text": "x"})
        do("end_turn", turn=turn())
        opened = do("announce_trigger", facts={"event": "door"}, offer=["a"])
        window = next(e for e in opened["events"] if e["event"] == "window_opened")["window"]
        do("claim_reaction", window=window["id"], combatant="a", action=attack)
        do("finish_reaction", window=window["id"], combatant="a")
        do("apply_condition", target="b", type="custom", boundary="end", anchor="c")
        do("apply_condition", target="c", type="custom", boundary="start", anchor="a")
        do("end_turn", turn=turn())
        seq = gm.call("get_combat", combat="order")["seq"]
        watcher.call("subscribe", combat="order", after=seq)
        result = do("end_turn", turn=turn())
        assert [e["event"] for e in result["events"]] == ["command_recorded", *TRANSITION_ORDER]
        live = [watcher.notification().params for _ in result["events"]]
        assert [e["event"] for e in live] == ["command_recorded", *TRANSITION_ORDER]
        assert [e["seq"] for e in live] == list(range(seq + 1, seq + 1 + len(live)))
