"""R2 Dice: every die recorded, replay never rolls, injected sources, player-supplied faces."""

from __future__ import annotations

import inspect

import pytest

from story import Story, of, player
from turnkeeper_engine import BUNDLED_RULES, Engine, SeededDice, SystemDice, decide, fold
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import Check, RollOff

RULESETS = ("marvel", "dnd3e")


def _check_faces(check: Check) -> list[int]:
    return [*check.rolled, *(r.new for r in check.rerolls)]


def _rolloff_faces(rolloff: RollOff | None) -> list[int]:
    if rolloff is None:
        return []
    return [face for rolls in rolloff.passes for _, face in rolls]


def recorded_faces(events: list[ev.Event]) -> list[int]:
    """Every face the events hold, in the order the dice were rolled."""
    found: list[int] = []
    for e in events:
        if isinstance(e, ev.InitiativeRolled) and e.combatant == e.members[0]:
            found += _check_faces(e.check)
        elif isinstance(e, ev.CombatStarted):
            found += [f for r in e.rolloffs for f in _rolloff_faces(r)]
        elif isinstance(e, ev.CombatantSlotted):
            found += _rolloff_faces(e.rolloff)
        elif isinstance(e, ev.SequenceOrdered):
            found += [f for _, check in e.checks for f in _check_faces(check)]
            found += [f for r in e.rolloffs for f in _rolloff_faces(r)]
    return found


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r2_every_die_rolled_is_recorded_in_an_event(ruleset: str) -> None:
    s = Story(ruleset)
    s.add("a")
    s.add("b")
    s.add("c")
    pushed: list[int] = []

    def push(*faces: int) -> None:
        pushed.extend(faces)
        s.dice.push(*faces)

    if ruleset == "marvel":
        push(4, 4, 4)  # a: 12
        s.roll("a")
        push(3, 3, 3, 6)  # b: 9 with an edge, rerolls a 3 into a 6: 12
        s.roll("b", edges=1)
        push(2, 2, 2)  # c: 6
        push(5, 2)  # a and b tie exactly: a roll-off
        s.do(c.StartCombat())
        push(3, 4, 5, 6, 2)  # late arrival d: 12, ties a; wins the roll-off 6 to 2
        s.add("d")
    else:
        push(12, 12, 6)  # a, b, c
        push(17, 3)  # a and b tie exactly: a roll-off
        s.do(c.StartCombat())
        push(12, 20, 1)  # late arrival d: 12, ties a; wins the roll-off 20 to 1
        s.add("d")
    assert not s.dice.faces  # every face lined up was used
    assert s.state.order[0] == "d"
    assert recorded_faces(s.log) == pushed


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r2_replaying_events_never_rolls_again(ruleset: str) -> None:
    s = Story(ruleset)
    for combatant_id in ("a", "b", "c"):
        s.add(combatant_id)
    s.dice.push(*((4, 4, 4) * 3 if ruleset == "marvel" else (12, 12, 12)))
    s.dice.push(1, 2, 3)  # the three-way roll-off
    s.do(c.StartCombat())
    s.run_round()
    assert not s.dice.faces
    # Folding the log needs no dice at all, and reaches exactly the same state.
    replayed = fold(s.log)
    assert replayed == s.state
    assert replayed.order == s.state.order
    assert {m.id: m.check for m in replayed.combatants} == {
        m.id: m.check for m in s.state.combatants
    }


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r2_seeded_dice_are_reproducible(ruleset: str) -> None:
    def run(seed: int) -> list[ev.Event]:
        engine = Engine(SeededDice(seed), rules=BUNDLED_RULES)
        log: list[ev.Event] = []
        commands: list[c.Command] = [c.CreateCombat("seeded", ruleset)]
        commands += [c.AddCombatant(f"n{i}", f"N{i}") for i in range(8)]
        commands.append(c.StartCombat())
        for command in commands:
            result = engine.handle(command, 0.0)
            assert isinstance(result, list)
            log += result
        return log

    first, again = run(616), run(616)
    assert first == again
    checks = [e.check.rolled for e in of(first, ev.InitiativeRolled)]
    assert len(checks) == 8
    # A different seed gives different dice (8 checks agreeing by chance is negligible).
    assert checks != [e.check.rolled for e in of(run(617), ev.InitiativeRolled)]


def test_r2_the_engine_never_rolls_on_its_own_and_system_dice_roll_every_face() -> None:
    # No default: a caller always says which dice the engine rolls (the daemon, SystemDice).
    for function in (decide, Engine):
        assert inspect.signature(function).parameters["dice"].default is inspect.Parameter.empty
    faces = {SystemDice().roll(6) for _ in range(600)}
    assert faces == {1, 2, 3, 4, 5, 6}


def _table(ruleset: str) -> Story:
    s = Story(ruleset)
    s.add("hero", "Hero", controller="ann", player_character=True, init_mod=2)
    s.add("villain", "Villain", init_mod=1)
    return s


@pytest.mark.parametrize(
    ("ruleset", "supplied", "field"),
    [
        ("marvel", (3, 7, 2), "faces[1]"),
        ("marvel", (0, 4, 2), "faces[0]"),
        ("marvel", (3, 4, 2, 6), "faces"),
        ("marvel", (3, 4), "faces"),
        ("marvel", (), "faces"),
        ("dnd3e", (21,), "faces[0]"),
        ("dnd3e", (0,), "faces[0]"),
        ("dnd3e", (10, 11), "faces"),
    ],
)
def test_r2_supplied_faces_are_validated(
    ruleset: str, supplied: tuple[int, ...], field: str
) -> None:
    s = _table(ruleset)
    error = s.refuse(c.RollInitiative("hero", faces=supplied), player("ann"))
    assert (error.code, error.field) == ("invalid_faces", field)
    assert s.state.get("hero").check is None


def test_r2_supplied_faces_for_an_edge_reroll_are_validated_too() -> None:
    s = _table("marvel")
    # The edge rerolls the lowest die with the fourth face, which is not on a d6.
    error = s.refuse(c.RollInitiative("hero", faces=(3, 4, 5, 9), edges=1), player("ann"))
    assert (error.code, error.field) == ("invalid_faces", "faces[3]")
    error = s.refuse(c.RollInitiative("hero", faces=(3, 4, 5), edges=1), player("ann"))
    assert (error.code, error.field) == ("invalid_faces", "faces")


@pytest.mark.parametrize(
    ("ruleset", "supplied", "total"), [("marvel", (6, 1, 4), 13), ("dnd3e", (20,), 22)]
)
def test_r2_supplied_faces_are_used_and_who_supplied_them_recorded(
    ruleset: str, supplied: tuple[int, ...], total: int
) -> None:
    s = _table(ruleset)
    rolled = s.do(c.RollInitiative("hero", faces=supplied), player("ann"))
    (event,) = of(rolled, ev.InitiativeRolled)
    assert event.check.rolled == supplied
    assert event.check.total == total
    assert event.check.supplied_by == "ann"
    assert s.state.get("hero").check.supplied_by == "ann"
    # Rolled by the engine's dice: nobody supplied them.
    s.dice.push(*((2, 2, 2) if ruleset == "marvel" else (2,)))
    rolled = s.roll("villain")
    assert of(rolled, ev.InitiativeRolled)[0].check.supplied_by is None


@pytest.mark.parametrize(("ruleset", "supplied"), [("marvel", (6, 6, 6)), ("dnd3e", (20,))])
def test_r2_a_player_supplies_faces_only_for_their_own_combatant(
    ruleset: str, supplied: tuple[int, ...]
) -> None:
    s = _table(ruleset)
    error = s.refuse(c.RollInitiative("villain", faces=supplied), player("ann"))
    assert error.code == "forbidden"
    s.add("other", "Other", controller="bob", player_character=True)
    error = s.refuse(c.RollInitiative("other", faces=supplied), player("ann"))
    assert error.code == "forbidden"
