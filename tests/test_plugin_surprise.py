"""The bundled surprise plugin (R8): who is Surprised at the start, and unseen attackers later.

Both the plugin's dice and the table's are lined up by each test, so every number below is the
one the table reads (R2)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

import turnkeeper_surprise
from story import QueueDice
from turnkeeper_engine import SeededDice, SystemDice, visible
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Actor, Reroll
from turnkeeper_sdk.testing import Table
from turnkeeper_surprise import SurprisePlugin

TableFactory = Callable[..., Table]
PLAYER = Actor("player", "alice")


def marvel(
    turnkeeper_table: TableFactory, faces: tuple[int, ...] = ()
) -> tuple[Table, QueueDice, QueueDice]:
    """A marvel table with the surprise plugin; returns it, the plugin's dice and the table's."""
    mine, table_dice = QueueDice(), QueueDice()
    table_dice.push(*faces)
    table = turnkeeper_table("marvel", plugins={"surprise": SurprisePlugin(mine)}, dice=table_dice)
    return table, mine, table_dice


def outcomes(table: Table) -> list[ev.OutcomeRecorded]:
    return table.of(ev.OutcomeRecorded)


def values(outcome: ev.OutcomeRecorded) -> dict[str, object]:
    return dict(outcome.values)


def checks(table: Table) -> dict[str, ev.InitiativeRolled]:
    return {e.combatant: e for e in table.of(ev.InitiativeRolled)}


# ------------------------------------------------------------------------- at the combat's start


def test_r8_failed_vigilance_against_an_ambush_marks_surprised_with_one_trouble(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine, engine = marvel(turnkeeper_table)
    table.add("cap", player_character=True, init_mod=3, tags=("vigilance:1",))
    table.add("widow", player_character=True, init_mod=4, tags=("vigilance:3",))
    table.add("agent1", tags=("stealth:2",))
    table.add("agent2", tags=("stealth:4",))
    # The Hydra side is all sneaking: 10 + its clumsiest stealth (2) = 12 to notice them.
    mine.push(2, 3, 4)  # Captain America: 2 + 3 + 4 + 1 = 10, fails
    mine.push(3, 4, 1)  # Black Widow: 3 + 4 + M(6) + 3 = 16, notices them
    engine.push(6, 5, 1, 3)  # cap: 6, 5, M and his trouble rerolls the M: 3 is kept
    engine.push(4, 4, 4, 2, 2, 2, 3, 3, 3)  # widow 16, agent1 6, agent2 9
    table.start()

    cap, widow = outcomes(table)
    assert cap.text == (
        "cap's Vigilance check against the ambush of side narrator: 2, 3, 4 + 1 = 10 against 12: "
        "fails: Surprised."
    )
    assert values(cap) == {
        "watcher": "cap",
        "by": "side:narrator",
        "dice": "d616",
        "rolled": "2,3,4",
        "rerolls": "",
        "faces": "2,3,4",
        "vigilance": 1,
        "total": 10,
        "fantastic": False,
        "troubles": 0,
        "target_number": 12,
        "noticed": False,
    }
    assert widow.text == (
        "widow's Vigilance check against the ambush of side narrator: 3, 4, M + 3 = 16 against "
        "12: notices them."
    )
    assert [e.combatant for e in table.of(ev.SurpriseMarked)] == ["cap"]
    assert table.by("surprise") == ["record_outcome", "mark_surprised", "record_outcome"]
    # R8 through R3: one trouble; it rerolls his Marvel die and the Fantastic is lost with it.
    check = checks(table)["cap"].check
    assert (check.troubles, check.rerolls) == (1, (Reroll("trouble", 2, 1, 3, 3),))
    assert (check.faces, check.total, check.fantastic) == ((6, 5, 3), 17, False)
    assert checks(table)["widow"].check.troubles == 0
    assert table.of(ev.CombatStarted)[0].bonus == ()
    assert table.problems == []


def test_r8_unaware_is_surprised_without_a_check_and_gets_no_bonus_round_turn(
    turnkeeper_table: TableFactory,
) -> None:
    table, _, engine = marvel(turnkeeper_table)
    table.add("spidey", player_character=True, init_mod=3, tags=("unaware",))
    table.add("ock", init_mod=2)
    engine.push(6, 6, 1, 1)  # spidey: 6, 6, M; the trouble's 1 on the Marvel die keeps the M
    engine.push(5, 5, 1)  # ock: 5, 5, M
    table.start()

    (unaware,) = outcomes(table)
    assert (unaware.kind, unaware.text) == (
        "surprise",
        "spidey is unaware: Surprised without a check.",
    )
    assert [e.combatant for e in table.of(ev.SurpriseMarked)] == ["spidey"]
    check = checks(table)["spidey"].check
    assert (check.troubles, check.total, check.fantastic) == (1, 21, True)
    # R7/R8: still Fantastic, but a Surprised combatant has no bonus-round turn.
    assert table.of(ev.CombatStarted)[0].bonus == ("ock",)


def test_r8_invisible_ambushers_give_one_trouble_on_the_check(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine, engine = marvel(turnkeeper_table)
    table.add("thing", player_character=True, init_mod=1)
    table.add("skrull1", tags=("invisible",))
    table.add("skrull2", tags=("invisible", "stealth:3"))
    mine.push(5, 2, 3, 1)  # 5, 2, 3: the trouble rerolls the 5, the 1 is kept: 1 + 2 + 3 = 6
    engine.push(4, 4, 4, 1)  # thing: his trouble rerolls the Marvel die; an M is no worse
    engine.push(3, 3, 3, 2, 2, 2)  # the Skrulls: 9 and 6
    table.start()

    (check,) = outcomes(table)
    assert check.text == (
        "thing's Vigilance check against the ambush of side narrator: 1, 2, 3 + 0 = 6 against 10: "
        "fails: Surprised."
    )
    assert values(check)["rolled"] == "5,2,3"
    assert values(check)["rerolls"] == "trouble die 1: 5 -> 1, kept 1"
    assert values(check)["troubles"] == 1
    assert [e.combatant for e in table.of(ev.SurpriseMarked)] == ["thing"]


def test_r8_a_side_with_a_member_in_plain_sight_ambushes_nobody(
    turnkeeper_table: TableFactory,
) -> None:
    table, _, engine = marvel(turnkeeper_table)
    table.add("hawkeye", player_character=True, init_mod=2)
    table.add("sniper", tags=("stealth:5",))
    table.add("brute")
    engine.push(4, 4, 4, 3, 3, 3, 2, 2, 2)
    table.start()  # the plugin's dice are empty: a roll would fail the test
    assert table.by("surprise") == []
    assert table.of(ev.SurpriseMarked) == []


def test_r8_a_group_checks_once_and_every_member_is_surprised(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine, engine = marvel(turnkeeper_table)
    table.add("wolverine", player_character=True, init_mod=3, tags=("side:x-men", "stealth:6"))
    for goon in ("goon1", "goon2", "goon3"):
        table.add(goon, group="goons", tags=("side:hydra", "vigilance:1"))
    mine.push(3, 3, 3)  # the goons, once: 3 + 3 + 3 + 1 = 10 against 16
    engine.push(5, 5, 5, 4, 4, 4, 2)  # wolverine 18; the goons 4, 4, 4, the trouble's 2 kept
    table.start()

    (check,) = outcomes(table)
    assert values(check)["watcher"] == "goon1"
    assert values(check)["by"] == "side:x-men"
    assert [e.combatant for e in table.of(ev.SurpriseMarked)] == ["goon1", "goon2", "goon3"]
    group = checks(table)["goon1"]
    assert group.members == ("goon1", "goon2", "goon3")
    assert (group.check.troubles, group.check.total) == (1, 10)


def test_r8_r16_a_hidden_ambusher_keeps_its_check_from_the_players(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine, engine = marvel(turnkeeper_table)
    table.add("jessica", controller="alice", player_character=True, init_mod=2)
    table.add("killgrave", hidden=True)
    mine.push(1, 2, 2)  # 5 against 10: Surprised
    engine.push(3, 3, 2, 1, 4, 4, 4)
    table.start()

    (check,) = outcomes(table)
    assert check.combatant == "killgrave"
    (marked,) = table.of(ev.SurpriseMarked)
    assert visible(check, table.state, PLAYER) is None
    assert visible(marked, table.state, PLAYER) == marked  # she knows she was caught off guard


def test_r8_dnd3e_combats_are_left_alone(turnkeeper_table: TableFactory) -> None:
    table = turnkeeper_table(
        "dnd3e", plugins={"surprise": SurprisePlugin(QueueDice())}, dice=SeededDice(2)
    )
    table.add("fighter", player_character=True, tags=("unaware",))
    table.add("rogue", tags=("stealth:9", "invisible"))
    table.start()
    turn = table.turn()
    table.do(c.DeclareAction(turn, ActionSpec("attack", targets=("fighter",))))
    assert table.by("surprise") == []


# --------------------------------------------------------------------------------- mid-combat


def fantastic_four(turnkeeper_table: TableFactory) -> tuple[Table, QueueDice]:
    """The seed's Invisible Woman scene: Reed 19, Sue 18, Doom 15, rolled before the start."""
    table, mine, _ = marvel(turnkeeper_table)
    table.add("reed", player_character=True, init_mod=2)
    table.add("sue", player_character=True, init_mod=2, tags=("invisible", "stealth:4"))
    table.add("doom", init_mod=3, tags=("vigilance:2",))
    table.do(c.RollInitiative("reed", faces=(6, 6, 5)))
    table.do(c.RollInitiative("sue", faces=(6, 5, 5)))
    table.do(c.RollInitiative("doom", faces=(4, 4, 4)))
    table.start()  # Sue is invisible, but Reed is in plain sight: no ambush
    table.end_turn()  # Mister Fantastic
    return table, mine


def test_r8_seed_invisible_woman_surprises_doctor_doom(turnkeeper_table: TableFactory) -> None:
    table, mine = fantastic_four(turnkeeper_table)
    assert table.by("surprise") == []
    # The Narrator makes a check for Doom to see if he detects her: he fails it.
    mine.push(4, 2, 3, 5)  # 4, 2, 3; her invisibility's trouble rerolls the 4, the 4 is kept
    events = table.do(c.DeclareAction(table.turn(), ActionSpec("attack", targets=("doom",))))
    # Decided before the attack lands: Sue has her edge on this very attack.
    names = [e.name for e in events]
    assert names.index("condition_applied") < names.index("action_declared")
    assert [e.edges for e in events if isinstance(e, ev.ActionDeclared)] == [("surprised:doom",)]

    (check,) = outcomes(table)
    assert check.text == (
        "doom's Vigilance check to notice sue: 4, 2, 3 + 2 = 11 against 14: fails: Surprised; "
        "sue has an edge on this attack and on attacks against doom until sue's next turn starts."
    )
    assert values(check)["rerolls"] == "trouble die 1: 4 -> 5, kept 4"
    assert values(check)["edge"] is True
    assert table.by("surprise") == ["record_outcome", "surprise"]
    (condition,) = table.state.conditions
    assert (condition.type, condition.target, condition.surprisers) == (
        "surprised",
        "doom",
        ("sue",),
    )
    # It lasts one round: until her next turn starts.
    table.end_turn()  # Sue
    table.end_turn()  # Doom; round 2
    assert [k.type for k in table.state.conditions] == ["surprised"]
    events = table.end_turn()
    assert table.turn().combatant == "sue"
    assert [e.type for e in events if isinstance(e, ev.ConditionExpired)] == ["surprised"]


def test_r8_an_attacker_that_is_noticed_surprises_nobody(turnkeeper_table: TableFactory) -> None:
    table, mine = fantastic_four(turnkeeper_table)
    mine.push(6, 5, 4, 6)  # 6, 5, 4: the trouble rerolls the 6 and a 6 is no worse: 17
    events = table.do(c.DeclareAction(table.turn(), ActionSpec("attack", targets=("doom",))))
    assert [e.edges for e in events if isinstance(e, ev.ActionDeclared)] == [()]
    (check,) = outcomes(table)
    assert check.text == (
        "doom's Vigilance check to notice sue: 6, 5, 4 + 2 = 17 against 14: notices the attack "
        "coming."
    )
    assert values(check)["edge"] is False
    assert table.state.conditions == ()


def test_r8_a_target_already_surprised_by_the_attacker_is_not_checked_again(
    turnkeeper_table: TableFactory,
) -> None:
    table, _ = fantastic_four(turnkeeper_table)
    table.do(c.Surprise("doom", ("sue",)))  # the narrator ruled it already
    events = table.do(c.DeclareAction(table.turn(), ActionSpec("attack", targets=("doom",))))
    assert table.by("surprise") == []
    assert [e.edges for e in events if isinstance(e, ev.ActionDeclared)] == [("surprised:doom",)]


def test_r8_a_seen_attacker_or_another_action_rolls_nothing(
    turnkeeper_table: TableFactory,
) -> None:
    table, _ = fantastic_four(turnkeeper_table)
    table.do(c.DeclareAction(table.turn(), ActionSpec("move")))
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), ActionSpec("attack", targets=("sue",))))  # Doom
    assert table.by("surprise") == []


def test_r8_r16_a_hidden_attackers_check_is_recorded_about_it(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine, _ = marvel(turnkeeper_table)
    table.add("daredevil", controller="alice", player_character=True, init_mod=1)
    table.add("bullseye", init_mod=4, hidden=True)
    table.do(c.RollInitiative("daredevil", faces=(2, 2, 2)))
    table.do(c.RollInitiative("bullseye", faces=(5, 5, 5)))
    table.start()
    mine.push(1, 1, 2)  # 1 + 1 + 2 = 4 against 10
    table.do(c.DeclareAction(table.turn(), ActionSpec("attack", targets=("daredevil",))))
    (check,) = outcomes(table)
    assert check.combatant == "bullseye"
    assert visible(check, table.state, PLAYER) is None
    (applied,) = table.of(ev.ConditionApplied)
    shown = visible(applied, table.state, PLAYER)
    assert isinstance(shown, ev.ConditionApplied)
    assert shown.condition.surprisers == ()  # Surprised, by no one she can see


# ------------------------------------------------------------------------- dice and packaging


def test_r2_plugin_dice_are_the_system_source_unless_injected(
    turnkeeper_table: TableFactory,
) -> None:
    assert isinstance(SurprisePlugin().dice, SystemDice)
    assert isinstance(turnkeeper_surprise.plugin.dice, SystemDice)

    def ambush(seed: int) -> list[tuple[str, tuple[tuple[str, object], ...]]]:
        table = turnkeeper_table(
            "marvel", plugins={"surprise": SurprisePlugin(SeededDice(seed))}, seed=seed
        )
        table.add("a", player_character=True)
        table.add("b", player_character=True, tags=("vigilance:1",))
        table.add("c", tags=("stealth:1",))
        table.start()
        return [(e.text, e.values) for e in outcomes(table)]

    assert ambush(11) == ambush(11)
    assert len(ambush(11)) == 2


def test_surprise_is_an_installed_entry_point() -> None:
    (point,) = entry_points(group="turnkeeper.plugins", name="surprise")
    assert point.load() is turnkeeper_surprise.plugin
    assert point.dist is not None
    assert (point.dist.name, point.dist.version) == ("turnkeeper-surprise", "0.1.0")
