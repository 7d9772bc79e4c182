"""R14 Refocus (dnd3e): a full-round action without movement; when the turn ends the combatant
moves to 20 + its initiative bonus by the tie chain and acts there from the next round."""

from __future__ import annotations

from story import Story, names, of, player
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev


def table() -> Story:
    """a 15 (+0), b 12 (+2), c 5 (+1): order a, b, c."""
    s = Story("dnd3e")
    s.add("a", controller="u1", player_character=True)
    s.roll("a", 15)
    s.add("b", init_mod=2, controller="u2", player_character=True)
    s.roll("b", 10)
    s.add("c", init_mod=1)
    s.roll("c", 4)
    s.do(c.StartCombat())
    assert s.state.order == ("a", "b", "c")
    return s


def test_r14_refocus_is_a_full_round_action() -> None:
    s = table()
    s.end_turn()
    events = s.do(c.Refocus(s.turn))
    (declared,) = of(events, ev.ActionDeclared)
    assert (declared.combatant, declared.action.kind, declared.action.type) == (
        "b",
        "refocus",
        "full",
    )
    assert s.state.turn is not None
    assert s.state.turn.refocus
    assert s.state.turn.used == ("full",)


def test_r14_refocus_moves_to_20_plus_bonus_from_the_next_round() -> None:
    s = table()
    s.end_turn()  # a
    s.do(c.Refocus(s.turn))  # b
    events = s.end_turn()
    got = names(events)
    assert got.index("turn_ended") < got.index("place_changed") < got.index("turn_started")
    (moved,) = of(events, ev.PlaceChanged)
    assert (moved.combatant, moved.place, moved.reason) == ("b", 22, "refocus")
    assert moved.order == ("b", "a", "c")
    assert s.state.order == ("b", "a", "c")
    b = s.state.get("b")
    assert b is not None
    assert b.place == 22
    # The rest of this round goes on: c still acts, b does not act twice.
    assert s.current == "c"
    assert s.state.round == 1
    s.end_turn()
    assert s.state.round == 2
    assert s.run_round() == ["b", "a", "c"]
    assert s.run_round() == ["b", "a", "c"]


def test_r14_refocus_tie_higher_bonus_first() -> None:
    s = Story("dnd3e")
    s.add("hi", init_mod=3)
    s.roll("hi", 18)  # 21, bonus +3
    s.add("r", init_mod=1)
    s.roll("r", 2)  # refocuses to 21, bonus +1
    s.do(c.StartCombat())
    assert s.state.order == ("hi", "r")
    s.end_turn()
    s.do(c.Refocus(s.turn))
    (moved,) = of(s.end_turn(), ev.PlaceChanged)
    assert moved.place == 21
    assert s.state.order == ("hi", "r")  # same total: the higher initiative bonus goes first
    assert s.run_round() == ["hi", "r"]


def test_r14_refocus_tie_then_dexterity_decides() -> None:
    s = Story("dnd3e")
    s.add("slow", init_mod=1, dexterity=10)
    s.roll("slow", 20)  # 21
    s.add("quick", init_mod=1, dexterity=14)
    s.roll("quick", 3)  # refocuses to 21 with the same bonus and higher Dexterity
    s.add("dull", init_mod=1, dexterity=8)
    s.roll("dull", 19)  # 20
    s.do(c.StartCombat())
    assert s.state.order == ("slow", "dull", "quick")
    s.end_turn()
    s.end_turn()
    s.do(c.Refocus(s.turn))
    (moved,) = of(s.end_turn(), ev.PlaceChanged)
    assert moved.order == ("quick", "slow", "dull")
    assert s.run_round() == ["quick", "slow", "dull"]


def test_r14_refocus_lower_dexterity_goes_after_the_tie() -> None:
    s = Story("dnd3e")
    s.add("first", init_mod=1, dexterity=16)
    s.roll("first", 20)  # 21
    s.add("second", init_mod=1, dexterity=12)
    s.roll("second", 2)  # refocuses to 21, lower Dexterity
    s.add("third", init_mod=0)
    s.roll("third", 19)  # 19
    s.do(c.StartCombat())
    assert s.state.order == ("first", "third", "second")
    s.end_turn()
    s.end_turn()
    s.do(c.Refocus(s.turn))
    s.end_turn()
    assert s.state.order == ("first", "second", "third")
    assert s.run_round() == ["first", "second", "third"]


def test_r14_refocus_refused_after_a_move_or_standard() -> None:
    for kind in ("move", "attack"):
        s = table()
        s.do(c.DeclareAction(s.turn, c.ActionSpec(kind)))
        error = s.refuse(c.Refocus(s.turn))
        assert error.code == "action_unavailable"


def test_r14_refocus_allowed_after_a_free_action() -> None:
    s = table()
    s.do(c.DeclareAction(s.turn, c.ActionSpec("speak")))
    s.do(c.Refocus(s.turn))
    assert s.state.turn is not None
    assert s.state.turn.refocus


def test_r14_no_actions_after_refocus() -> None:
    s = table()
    s.do(c.Refocus(s.turn))
    for kind in ("move", "attack", "charge"):
        error = s.refuse(c.DeclareAction(s.turn, c.ActionSpec(kind)))
        assert error.code == "action_unavailable"
    error = s.refuse(c.Refocus(s.turn))
    assert error.code == "action_unavailable"
    trigger = c.Trigger("when it moves")
    error = s.refuse(c.Reserve(s.turn, "standard", c.ActionSpec("attack"), trigger))
    assert error.code == "action_unavailable"
    error = s.refuse(c.Hold(s.turn))
    assert error.code == "action_taken"


def test_r14_refocus_by_its_player_and_not_by_another() -> None:
    s = table()
    error = s.refuse(c.Refocus(s.turn), player("u2"))
    assert (error.code, error.field) == ("forbidden", "combatant")
    s.do(c.Refocus(s.turn), player("u1"))
    s.end_turn(player("u1"))
    assert s.state.order[0] == "a"


def test_r14_refocus_stale_turn() -> None:
    s = table()
    old = s.turn
    s.end_turn()
    error = s.refuse(c.Refocus(old))
    assert error.code == "stale_turn"


def test_r14_refocus_not_in_marvel() -> None:
    s = Story("marvel")
    s.add("a")
    s.roll("a", 6, 6, 6)
    s.do(c.StartCombat())
    error = s.refuse(c.Refocus(s.turn))
    assert error.code == "not_in_ruleset"


def test_r14_refocus_undone_with_its_turn() -> None:
    s = table()
    s.end_turn()
    before = s.state
    s.do(c.Refocus(s.turn))
    s.end_turn()
    s.do(c.Undo())
    s.do(c.Undo())
    assert s.state == before
    assert s.state.order == ("a", "b", "c")
