"""R4 Initiative order and ties: the tie chains, supplied orders, roll-offs and groups."""

from __future__ import annotations

import pytest

from story import Story, faces, of, player
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import RollOff

RULESETS = ("marvel", "dnd3e")


def start(s: Story) -> ev.CombatStarted:
    (started,) = of(s.do(c.StartCombat()), ev.CombatStarted)
    assert s.state.order == started.order
    return started


# ------------------------------------------------------------------------------------- marvel


def test_r4_marvel_higher_total_first() -> None:
    s = Story("marvel")
    for combatant_id, rolled in (("low", (2, 2, 2)), ("high", (6, 6, 5)), ("mid", (4, 4, 4))):
        s.add(combatant_id)
        s.roll(combatant_id, *rolled)
    assert start(s).order == ("high", "mid", "low")


def test_r4_marvel_fantastic_breaks_total_tie() -> None:
    s = Story("marvel")
    s.add("plain", init_mod=2, player_character=True)
    s.add("fantastic", init_mod=0)
    s.roll("plain", 5, 5, 5)  # 17, a higher modifier and a player character
    s.roll("fantastic", 6, 5, 1)  # 17, Fantastic
    combat = start(s)
    assert combat.order == ("fantastic", "plain")
    assert combat.rolloffs == ()


def test_r4_marvel_both_fantastic_higher_modifier_first() -> None:
    s = Story("marvel")
    s.add("a", init_mod=1)
    s.add("b", init_mod=2)
    s.roll("a", 6, 5, 1)  # 18
    s.roll("b", 5, 5, 1)  # 18
    assert start(s).order == ("b", "a")


def test_r4_marvel_higher_initiative_modifier_breaks_tie() -> None:
    s = Story("marvel")
    s.add("a", init_mod=1, player_character=True)
    s.add("b", init_mod=3)
    s.roll("a", 4, 4, 4)  # 13
    s.roll("b", 4, 4, 2)  # 13
    combat = start(s)
    assert combat.order == ("b", "a")
    assert combat.rolloffs == ()


def test_r4_marvel_player_characters_before_others() -> None:
    s = Story("marvel")
    s.add("npc", init_mod=2)
    s.add("pc", init_mod=2, controller="ann", player_character=True)
    s.roll("npc", 4, 4, 4)
    s.roll("pc", 4, 4, 4)
    combat = start(s)
    assert combat.order == ("pc", "npc")
    assert combat.rolloffs == ()


def _tied(ruleset: str, pcs: bool, *ids: str) -> Story:
    s = Story(ruleset)
    for combatant_id in ids:
        s.add(combatant_id, controller="ann" if pcs else None, player_character=pcs, init_mod=1)
        s.roll(combatant_id, *faces(ruleset, 12))
    return s


@pytest.mark.parametrize("pcs", [True, False])
def test_r4_marvel_supplied_order_before_roll_off(pcs: bool) -> None:
    s = _tied("marvel", pcs, "a", "b", "c")
    ordered = s.do(c.OrderTies(("c", "a", "b")))
    assert of(ordered, ev.TiesOrdered)[0].combatants == ("c", "a", "b")
    combat = start(s)  # no dice lined up: a roll would fail the test
    assert combat.order == ("c", "a", "b")
    assert combat.rolloffs == ()


def test_r4_marvel_players_supply_the_order_of_their_tied_characters() -> None:
    s = _tied("marvel", True, "a", "b")
    s.do(c.OrderTies(("b", "a")), player("ann"))
    assert start(s).order == ("b", "a")


def test_r4_marvel_a_player_cannot_order_someone_elses_characters() -> None:
    s = _tied("marvel", True, "a", "b")
    s.add("npc", init_mod=1)
    assert s.refuse(c.OrderTies(("b", "npc")), player("ann")).code == "forbidden"
    assert s.refuse(c.OrderTies(("a", "b")), player("bob")).code == "forbidden"


@pytest.mark.parametrize("pcs", [True, False])
def test_r4_marvel_roll_off_repeats_among_those_still_tied(pcs: bool) -> None:
    s = _tied("marvel", pcs, "a", "b", "c")
    s.dice.push(4, 4, 2, 1, 6)  # a 4, b 4, c 2; then a and b again: a 1, b 6
    combat = start(s)
    assert combat.order == ("b", "a", "c")
    assert combat.rolloffs == (RollOff(6, ((("a", 4), ("b", 4), ("c", 2)), (("a", 1), ("b", 6)))),)
    assert not s.dice.faces


def test_r4_marvel_a_supplied_order_that_misses_a_tied_combatant_rolls_off() -> None:
    s = _tied("marvel", True, "a", "b", "c")
    s.do(c.OrderTies(("c", "a")))
    s.dice.push(2, 5, 3)
    combat = start(s)
    assert combat.order == ("b", "c", "a")
    assert combat.rolloffs == (RollOff(6, ((("a", 2), ("b", 5), ("c", 3)),)),)


def test_r4_marvel_tied_player_characters_and_npcs_split_before_any_roll_off() -> None:
    s = Story("marvel")
    for combatant_id, pc in (("n1", False), ("p1", True), ("n2", False), ("p2", True)):
        s.add(combatant_id, player_character=pc, controller="ann" if pc else None)
        s.roll(combatant_id, 4, 4, 4)
    s.dice.push(2, 5, 6, 1)  # p1 2, p2 5; then n1 6, n2 1
    combat = start(s)
    assert combat.order == ("p2", "p1", "n1", "n2")
    assert combat.rolloffs == (
        RollOff(6, ((("p1", 2), ("p2", 5)),)),
        RollOff(6, ((("n1", 6), ("n2", 1)),)),
    )


# -------------------------------------------------------------------------------------- dnd3e


def test_r4_dnd3e_higher_total_first() -> None:
    s = Story("dnd3e")
    for combatant_id, face, bonus in (("a", 10, 5), ("b", 18, 0), ("c", 3, 1)):
        s.add(combatant_id, init_mod=bonus)
        s.roll(combatant_id, face)
    assert {m.id: m.check.total for m in s.state.combatants} == {"a": 15, "b": 18, "c": 4}
    assert start(s).order == ("b", "a", "c")


def test_r4_dnd3e_higher_initiative_bonus_breaks_total_tie() -> None:
    s = Story("dnd3e")
    s.add("a", init_mod=1, dexterity=18)
    s.add("b", init_mod=4, dexterity=10)
    s.roll("a", 15)  # 16
    s.roll("b", 12)  # 16
    combat = start(s)
    assert combat.order == ("b", "a")
    assert combat.rolloffs == ()


def test_r4_dnd3e_higher_dexterity_breaks_bonus_tie() -> None:
    s = Story("dnd3e")
    s.add("a", init_mod=2, dexterity=14, player_character=True)
    s.add("b", init_mod=2, dexterity=15)
    s.roll("a", 10)
    s.roll("b", 10)
    combat = start(s)
    assert combat.order == ("b", "a")
    assert combat.rolloffs == ()


def test_r4_dnd3e_then_a_d20_roll_off_with_repeats_player_characters_no_priority() -> None:
    s = Story("dnd3e")
    for combatant_id, pc in (("npc", False), ("pc", True), ("other", False)):
        s.add(combatant_id, init_mod=2, dexterity=12, player_character=pc)
        s.roll(combatant_id, 10)
    s.dice.push(17, 17, 3, 20, 19)  # npc 17, pc 17, other 3; then npc 20, pc 19
    combat = start(s)
    assert combat.order == ("npc", "pc", "other")
    assert combat.rolloffs == (
        RollOff(20, ((("npc", 17), ("pc", 17), ("other", 3)), (("npc", 20), ("pc", 19)))),
    )
    assert not s.dice.faces


def test_r4_dnd3e_ties_are_not_ordered_by_request() -> None:
    s = _tied("dnd3e", True, "a", "b")
    assert s.refuse(c.OrderTies(("b", "a"))).code == "not_in_ruleset"


# ------------------------------------------------------------------------------------- groups


def _with_group(ruleset: str) -> Story:
    s = Story(ruleset)
    s.add("g1", group="goons")
    s.add("hero", controller="ann", player_character=True, init_mod=0)
    s.add("g2", group="goons")
    s.add("boss", init_mod=0)
    s.add("g3", group="goons")
    return s


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_group_makes_one_check_every_member_has_it(ruleset: str) -> None:
    s = _with_group(ruleset)
    rolled = s.roll("g2", *faces(ruleset, 10))
    (event,) = of(rolled, ev.InitiativeRolled)
    assert event.members == ("g1", "g2", "g3")
    assert {m.id: m.check for m in s.state.combatants if m.group} == {
        "g1": event.check,
        "g2": event.check,
        "g3": event.check,
    }
    assert {m.place for m in s.state.combatants if m.group} == {10}
    assert s.refuse(c.RollInitiative("g3", faces=faces(ruleset, 4))).code == "already_rolled"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_group_member_added_after_the_group_rolled_shares_its_check(ruleset: str) -> None:
    s = _with_group(ruleset)
    s.roll("hero", *faces(ruleset, 14))
    s.roll("boss", *faces(ruleset, 6))
    (group_check,) = of(s.roll("g1", *faces(ruleset, 10)), ev.InitiativeRolled)
    s.add("g4", group="goons")
    started = s.do(c.StartCombat())  # no dice lined up: the group has rolled its one check
    for rolled in of(started, ev.InitiativeRolled):
        assert rolled.check == group_check.check
    assert {m.id: m.check for m in s.state.combatants if m.group} == {
        "g1": group_check.check,
        "g2": group_check.check,
        "g3": group_check.check,
        "g4": group_check.check,
    }
    assert s.state.order == ("hero", "g1", "g2", "g3", "g4", "boss")


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_group_members_act_consecutively_in_the_order_added(ruleset: str) -> None:
    s = _with_group(ruleset)
    s.roll("hero", *faces(ruleset, 14))
    s.roll("boss", *faces(ruleset, 6))
    s.dice.push(*faces(ruleset, 10))  # the group's one check, rolled at the start
    started = s.do(c.StartCombat())
    assert len(of(started, ev.InitiativeRolled)) == 1
    assert s.state.order == ("hero", "g1", "g2", "g3", "boss")
    assert s.run_round() == ["hero", "g1", "g2", "g3", "boss"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_narrator_reorders_a_group_before_the_start(ruleset: str) -> None:
    s = _with_group(ruleset)
    s.roll("hero", *faces(ruleset, 14))
    s.roll("boss", *faces(ruleset, 6))
    s.roll("g1", *faces(ruleset, 10))
    reordered = s.do(c.ReorderGroup("goons", ("g3", "g1", "g2")))
    assert of(reordered, ev.GroupReordered)[0].combatants == ("g3", "g1", "g2")
    assert start(s).order == ("hero", "g3", "g1", "g2", "boss")


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_narrator_reorders_a_group_during_the_combat(ruleset: str) -> None:
    s = _with_group(ruleset)
    s.roll("hero", *faces(ruleset, 14))
    s.roll("boss", *faces(ruleset, 6))
    s.roll("g1", *faces(ruleset, 10))
    start(s)
    s.do(c.ReorderGroup("goons", ("g2", "g3", "g1")))
    assert s.state.order == ("hero", "g2", "g3", "g1", "boss")
    assert s.run_round() == ["hero", "g2", "g3", "g1", "boss"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_reorder_group_must_name_every_member_once(ruleset: str) -> None:
    s = _with_group(ruleset)
    assert s.refuse(c.ReorderGroup("goons", ("g1", "g2"))).code == "invalid_value"
    assert s.refuse(c.ReorderGroup("goons", ("g1", "g2", "g2"))).code == "invalid_value"
    assert s.refuse(c.ReorderGroup("goons", ("g1", "g2", "hero"))).code == "invalid_value"
    assert s.refuse(c.ReorderGroup("nobody", ("g1",))).code == "unknown_group"
    assert s.refuse(c.ReorderGroup("goons", ("g3", "g2", "g1")), player("ann")).code == "forbidden"


# ------------------------------------------------------------------------- order over the combat


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_order_persists_from_round_to_round(ruleset: str) -> None:
    s = _tied(ruleset, False, "a", "b", "c")
    s.dice.push(1, 3, 2)  # the one roll-off, at the start
    order = start(s).order
    assert order == ("b", "c", "a")
    for round_no in (1, 2, 3):
        assert s.state.round == round_no
        assert s.run_round() == list(order)  # no dice lined up: nothing rolls again
    assert s.state.order == order
    assert len(of(s.log, ev.InitiativeRolled)) == 3


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_a_new_combat_rolls_a_new_order(ruleset: str) -> None:
    def fight(first: int, second: int) -> tuple[str, ...]:
        s = Story(ruleset)
        s.add("a")
        s.add("b")
        s.dice.push(*faces(ruleset, first), *faces(ruleset, second))
        return start(s).order

    assert fight(12, 6) == ("a", "b")
    assert fight(6, 12) == ("b", "a")


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r4_order_is_stored_explicitly_not_recomputed(ruleset: str) -> None:
    s = Story(ruleset)
    s.add("a", init_mod=3)
    s.add("b", init_mod=0)
    s.add("c", init_mod=0)
    s.roll("a", *faces(ruleset, 12))  # 15
    s.roll("b", *faces(ruleset, 10))  # 10
    s.roll("c", *faces(ruleset, 5))  # 5
    start(s)
    assert s.current == "a"
    s.do(c.Hold(s.turn))
    s.do(c.TakeHeldTurn("a", "after", "c"))
    assert s.current == "b"
    s.end_turn()
    placed = s.end_turn()  # c's turn ends: a's held turn starts right after it
    changed = of(placed, ev.PlaceChanged)[0]
    assert (changed.combatant, changed.place, changed.order) == ("a", 5, ("b", "c", "a"))
    assert s.current == "a"
    # a now has c's number and a higher modifier: a recomputed order would put a before c.
    assert s.state.get("a").place == s.state.get("c").place == 5
    s.end_turn()
    assert s.state.round == 2
    assert s.state.order == ("b", "c", "a")
    assert s.run_round() == ["b", "c", "a"]
