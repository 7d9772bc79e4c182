"""R3 The d616 initiative check (marvel): M, Fantastic, Ultimate Fantastic, edges and troubles."""

from __future__ import annotations

import pytest

from story import Story, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import d616_display
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import Check, Reroll


def check(*faces: int, init_mod: int = 0, edges: int = 0, troubles: int = 0) -> Check:
    """Roll one marvel check with the narrator supplying ``faces`` (rerolls included)."""
    s = Story("marvel")
    s.add("x", init_mod=init_mod)
    rolled = s.roll("x", *faces, edges=edges, troubles=troubles)
    (event,) = of(rolled, ev.InitiativeRolled)
    return event.check


def test_r3_marvel_die_1_is_m_counts_6_and_is_fantastic() -> None:
    k = check(2, 3, 1, init_mod=1)
    assert k.dice == "d616"
    assert k.faces == (2, 3, 1)
    assert k.total == 2 + 3 + 6 + 1
    assert k.fantastic is True
    assert k.ultimate is False
    assert d616_display(k) == "2, 3, M"


def test_r3_a_1_on_a_regular_die_is_a_plain_1() -> None:
    k = check(1, 1, 3)
    assert k.total == 5
    assert k.fantastic is False
    assert d616_display(k) == "1, 1, 3"


def test_r3_6_6_m_is_an_ultimate_fantastic() -> None:
    k = check(6, 6, 1, init_mod=2)
    assert k.total == 20
    assert (k.fantastic, k.ultimate) == (True, True)
    assert d616_display(k) == "6, 6, M"


def test_r3_6_6_6_is_neither_fantastic_nor_ultimate() -> None:
    k = check(6, 6, 6)
    assert k.total == 18
    assert (k.fantastic, k.ultimate) == (False, False)


def test_r3_ultimate_fantastic_counts_as_a_fantastic_for_initiative() -> None:
    s = Story("marvel")
    s.add("ultimate", init_mod=0)
    s.add("fantastic", init_mod=1)
    s.roll("ultimate", 6, 6, 1)  # 18, Ultimate Fantastic
    s.roll("fantastic", 6, 5, 1)  # 17 + 1 = 18, Fantastic
    started = s.do(c.StartCombat())
    (combat,) = of(started, ev.CombatStarted)
    # Equal totals, both Fantastic: the higher modifier goes first, the Ultimate gains nothing.
    assert combat.order == ("fantastic", "ultimate")
    assert combat.bonus == ("fantastic", "ultimate")
    assert combat.rolloffs == ()


def test_r3_total_is_the_dice_plus_the_modifier_and_always_succeeds() -> None:
    s = Story("marvel")
    s.add("slow", init_mod=-3)
    s.add("quick", init_mod=4)
    assert of(s.roll("slow", 1, 1, 2), ev.InitiativeRolled)[0].check.total == 1
    assert of(s.roll("quick", 2, 3, 4), ev.InitiativeRolled)[0].check.total == 13
    s.do(c.StartCombat())
    assert s.state.order == ("quick", "slow")
    assert s.run_round() == ["quick", "slow"]


def test_r3_edges_and_troubles_cancel_one_for_one() -> None:
    k = check(2, 5, 4, edges=1, troubles=1)
    assert k.rerolls == ()
    assert k.faces == (2, 5, 4)
    assert (k.edges, k.troubles) == (1, 1)
    # Two edges and one trouble leave one edge: one reroll, of the lowest die.
    k = check(2, 5, 4, 6, edges=2, troubles=1)
    assert k.rerolls == (Reroll("edge", 0, 2, 6, 6),)
    assert k.total == 15
    # Two troubles and one edge leave one trouble: one reroll, of the highest die.
    k = check(2, 5, 4, 1, edges=1, troubles=2)
    assert k.rerolls == (Reroll("trouble", 1, 5, 1, 1),)
    assert k.total == 7


def test_r3_cancelled_edges_roll_no_extra_die() -> None:
    s = Story("marvel")
    s.add("x")
    error = s.refuse(c.RollInitiative("x", faces=(2, 5, 4, 6), edges=1, troubles=1))
    assert (error.code, error.field) == ("invalid_faces", "faces")


def test_r3_edge_rerolls_the_lowest_die_and_keeps_the_better() -> None:
    k = check(2, 5, 4, 6, edges=1)
    assert k.rolled == (2, 5, 4)
    assert k.faces == (6, 5, 4)
    assert k.rerolls == (Reroll("edge", 0, 2, 6, 6),)
    assert k.total == 15
    k = check(2, 5, 4, 1, edges=1)
    assert k.faces == (2, 5, 4)
    assert k.rerolls == (Reroll("edge", 0, 2, 1, 2),)
    assert k.total == 11


def test_r3_edge_counts_m_as_6_when_finding_the_lowest() -> None:
    k = check(5, 6, 1, 6, edges=1)
    assert k.rerolls == (Reroll("edge", 0, 5, 6, 6),)
    assert k.faces == (6, 6, 1)
    assert (k.total, k.fantastic, k.ultimate) == (18, True, True)


@pytest.mark.parametrize(
    ("faces", "die"),
    [((3, 5, 3), 0), ((5, 3, 3), 1), ((6, 6, 1), 0), ((4, 4, 4), 0)],
)
def test_r3_edge_among_equal_lowest_dice_prefers_a_regular_die(
    faces: tuple[int, ...], die: int
) -> None:
    k = check(*faces, 6, edges=1)
    assert k.rerolls[0].die == die
    assert k.rerolls[0].old == faces[die]


def test_r3_edge_can_turn_the_marvel_die_into_an_m() -> None:
    k = check(6, 6, 3, 1, edges=1)
    assert k.rerolls == (Reroll("edge", 2, 3, 1, 1),)
    assert (k.total, k.fantastic, k.ultimate) == (18, True, True)


def test_r3_trouble_rerolls_the_highest_die_and_keeps_the_worse() -> None:
    k = check(2, 5, 4, 1, troubles=1)
    assert k.faces == (2, 1, 4)
    assert k.rerolls == (Reroll("trouble", 1, 5, 1, 1),)
    assert k.total == 7
    k = check(2, 5, 4, 6, troubles=1)
    assert k.faces == (2, 5, 4)
    assert k.rerolls == (Reroll("trouble", 1, 5, 6, 5),)
    assert k.total == 11


@pytest.mark.parametrize(("faces", "die"), [((6, 3, 6), 2), ((6, 6, 5), 0), ((4, 6, 6), 2)])
def test_r3_trouble_among_equal_highest_dice_prefers_the_marvel_die(
    faces: tuple[int, ...], die: int
) -> None:
    k = check(*faces, 2, troubles=1)
    assert k.rerolls[0].die == die
    assert k.rerolls[0].old == faces[die]


def test_r3_trouble_on_the_m_loses_the_fantastic() -> None:
    # M counts 6, ties the regular 6, and the trouble prefers the Marvel die.
    k = check(6, 5, 1, 4, troubles=1)
    assert k.rerolls == (Reroll("trouble", 2, 1, 4, 4),)
    assert k.faces == (6, 5, 4)
    assert (k.total, k.fantastic, k.ultimate) == (15, False, False)


def test_r3_every_reroll_is_recorded_with_the_die_it_replaced() -> None:
    k = check(2, 3, 5, 6, 4, edges=2, init_mod=1)
    assert k.rolled == (2, 3, 5)
    assert k.rerolls == (Reroll("edge", 0, 2, 6, 6), Reroll("edge", 1, 3, 4, 4))
    assert k.faces == (6, 4, 5)
    assert k.total == 16
    k = check(6, 5, 4, 3, 2, troubles=2)
    assert k.rerolls == (Reroll("trouble", 0, 6, 3, 3), Reroll("trouble", 1, 5, 2, 2))
    assert k.faces == (3, 2, 4)
    assert k.total == 9


def test_r3_rerolls_with_the_engine_dice_are_recorded_as_well() -> None:
    s = Story("marvel")
    s.add("x")
    s.dice.push(1, 2, 3, 5)
    rolled = s.roll("x", edges=1)
    k = of(rolled, ev.InitiativeRolled)[0].check
    assert k.rolled == (1, 2, 3)
    assert k.rerolls == (Reroll("edge", 0, 1, 5, 5),)
    assert k.total == 10
    assert not s.dice.faces


def test_r3_surprised_at_the_start_has_one_trouble() -> None:
    s = Story("marvel")
    s.add("x")
    s.do(c.MarkSurprised("x"))
    rolled = s.roll("x", 6, 5, 1, 3)
    k = of(rolled, ev.InitiativeRolled)[0].check
    assert k.troubles == 1
    assert k.rerolls == (Reroll("trouble", 2, 1, 3, 3),)
    assert (k.total, k.fantastic) == (14, False)


def test_r3_surprised_at_the_start_trouble_cancels_an_edge() -> None:
    s = Story("marvel")
    s.add("x")
    s.do(c.MarkSurprised("x"))
    k = of(s.roll("x", 6, 5, 1, edges=1), ev.InitiativeRolled)[0].check
    assert (k.edges, k.troubles) == (1, 1)
    assert k.rerolls == ()
    assert (k.total, k.fantastic) == (17, True)


def test_r3_surprised_at_the_start_rolled_by_start_combat_has_one_trouble() -> None:
    s = Story("marvel")
    s.add("x")
    s.add("y")
    s.do(c.MarkSurprised("x"))
    s.dice.push(4, 4, 4, 2, 3, 3, 3)  # x: 4,4,4 then the trouble rerolls the Marvel die
    started = s.do(c.StartCombat())
    checks = {e.combatant: e.check for e in of(started, ev.InitiativeRolled)}
    assert checks["x"].rerolls == (Reroll("trouble", 2, 4, 2, 2),)
    assert checks["x"].total == 10
    assert checks["y"].rerolls == ()
    assert checks["y"].total == 9
