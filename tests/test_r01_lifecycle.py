"""R1 Combat lifecycle: phases, combatants coming and going, the narrator ending the combat."""

from __future__ import annotations

import pytest

from story import Story, faces, names, of, player
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger

RULESETS = ("marvel", "dnd3e")


def combat(ruleset: str, options: dict[str, float] | None = None, **totals: int) -> Story:
    """A started combat of NPCs with initiative modifier 0, rolled to ``totals``."""
    s = Story(ruleset, **(options or {}))
    for combatant_id, total in totals.items():
        s.add(combatant_id)
        s.roll(combatant_id, *faces(ruleset, total))
    s.do(c.StartCombat())
    return s


def test_r1_phases_marvel_setup_initiative_bonus_round_rounds_ended() -> None:
    s = Story("marvel")
    assert s.state.phase == "setup"
    s.add("hero", player_character=True)
    s.add("thug")
    assert s.state.phase == "setup"
    s.roll("hero", 6, 5, 1)  # Fantastic
    assert s.state.phase == "initiative"
    s.roll("thug", 3, 3, 3)
    assert s.state.phase == "initiative"
    s.do(c.StartCombat())
    assert (s.state.phase, s.state.round) == ("bonus_round", 0)
    assert s.run_round() == ["hero"]
    assert (s.state.phase, s.state.round) == ("rounds", 1)
    s.do(c.EndCombat())
    assert s.state.phase == "ended"


def test_r1_phases_dnd3e_setup_initiative_rounds_ended_no_bonus_round() -> None:
    s = Story("dnd3e")
    assert s.state.phase == "setup"
    s.add("fighter", player_character=True)
    s.add("orc")
    s.roll("fighter", 20)
    assert s.state.phase == "initiative"
    s.roll("orc", 1)
    started = s.do(c.StartCombat())
    assert of(started, ev.CombatStarted)[0].bonus == ()
    assert of(started, ev.RoundStarted)[0].round == 1
    assert (s.state.phase, s.state.round) == ("rounds", 1)
    assert "bonus_round" not in [s.state.phase]
    s.do(c.EndCombat())
    assert s.state.phase == "ended"


def _in_phase(ruleset: str, phase: str) -> Story:
    s = Story(ruleset)
    s.add("a")
    s.add("b")
    if phase == "setup":
        return s
    s.roll("a", *((6, 5, 1) if phase == "bonus_round" else faces(ruleset, 15)))
    if phase == "initiative":
        return s
    s.roll("b", *faces(ruleset, 10))
    s.do(c.StartCombat())
    assert s.state.phase == phase
    return s


PHASES = [
    ("marvel", "setup"),
    ("marvel", "initiative"),
    ("marvel", "bonus_round"),
    ("marvel", "rounds"),
    ("dnd3e", "setup"),
    ("dnd3e", "initiative"),
    ("dnd3e", "rounds"),
]


@pytest.mark.parametrize(("ruleset", "phase"), PHASES)
def test_r1_add_defeat_revive_remove_in_every_phase(ruleset: str, phase: str) -> None:
    s = _in_phase(ruleset, phase)
    in_play = phase in ("bonus_round", "rounds")
    if in_play:
        s.dice.push(*faces(ruleset, 4))
    added = s.add("x", "Newcomer")
    assert "combatant_added" in names(added)
    assert ("initiative_rolled" in names(added)) == in_play
    assert s.state.get("x").status == "active"
    assert ("x" in s.state.order) == in_play

    defeated = s.do(c.DefeatCombatant("x"))
    assert "combatant_defeated" in names(defeated)
    assert s.state.get("x").status == "defeated"
    revived = s.do(c.ReviveCombatant("x"))
    assert "combatant_revived" in names(revived)
    assert s.state.get("x").status == "active"
    removed = s.do(c.RemoveCombatant("x"))
    assert "combatant_removed" in names(removed)
    assert s.state.get("x").status == "removed"
    assert "x" not in s.state.order
    assert s.state.phase == phase


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_late_arrival_rolls_and_is_slotted_by_the_tie_chain(ruleset: str) -> None:
    s = combat(ruleset, a=15, b=10, c=5)
    assert s.current == "a"
    # 9 + 1 = 10: the same total as b, but a higher initiative modifier puts it ahead of b.
    s.dice.push(*faces(ruleset, 9))
    arrived = s.do(c.AddCombatant("y", "Newcomer", init_mod=1))
    (rolled,) = of(arrived, ev.InitiativeRolled)
    assert rolled.check.total == 10
    (slotted,) = of(arrived, ev.CombatantSlotted)
    assert slotted.order == ("a", "y", "b", "c")
    assert slotted.passed is False
    assert s.state.order == ("a", "y", "b", "c")
    assert s.run_round() == ["a", "y", "b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_late_arrival_whose_slot_has_passed_first_acts_next_round(ruleset: str) -> None:
    s = combat(ruleset, a=15, b=10, c=5)
    s.end_turn()
    s.end_turn()
    assert s.current == "c"
    s.dice.push(*faces(ruleset, 12))
    arrived = s.add("x", "Newcomer")
    (slotted,) = of(arrived, ev.CombatantSlotted)
    assert slotted.order == ("a", "x", "b", "c")
    assert slotted.passed is True
    ended = s.end_turn()
    assert of(ended, ev.RoundStarted)[0].round == 2
    assert s.current == "a"
    assert [e.combatant for e in of(s.log, ev.TurnStarted) if e.round == 1] == ["a", "b", "c"]
    assert s.run_round() == ["a", "x", "b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("how", ["defeat", "remove"])
def test_r1_defeated_and_removed_combatants_get_no_turns(ruleset: str, how: str) -> None:
    s = combat(ruleset, a=15, b=10, c=5)
    command = c.DefeatCombatant("b") if how == "defeat" else c.RemoveCombatant("b")
    s.do(command)
    assert s.run_round() == ["a", "c"]
    assert s.run_round() == ["a", "c"]
    assert "b" not in {e.combatant for e in of(s.log, ev.TurnStarted)}


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_revived_combatant_takes_turns_again_at_its_place(ruleset: str) -> None:
    s = combat(ruleset, a=15, b=10, c=5)
    s.do(c.DefeatCombatant("b"))
    s.do(c.ReviveCombatant("b"))  # before its slot came up: it still acts this round
    assert s.run_round() == ["a", "b", "c"]
    s.do(c.DefeatCombatant("b"))
    assert s.run_round() == ["a", "c"]
    revived = s.do(c.ReviveCombatant("b"))
    assert not of(revived, ev.PlaceChanged)
    assert s.state.order == ("a", "b", "c")  # it kept its place in the order
    assert s.run_round() == ["a", "b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("how", ["defeat", "remove"])
def test_r1_defeat_or_removal_cancels_holds_and_reservations(ruleset: str, how: str) -> None:
    s = combat(ruleset, a=15, b=10, c=5)
    s.do(c.Hold(s.turn))  # a holds (marvel) / delays (dnd3e)
    assert s.current == "b"
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("c comes close")))
    (reservation,) = s.state.reservations
    s.end_turn()
    assert s.current == "c"

    def out(i: str) -> c.Command:
        return c.DefeatCombatant(i) if how == "defeat" else c.RemoveCombatant(i)

    reason = "defeated" if how == "defeat" else "removed"
    gone = s.do(out("a"))
    (cancelled,) = of(gone, ev.HoldCancelled)
    assert (cancelled.combatant, cancelled.reason) == ("a", reason)
    assert s.state.holds == ()
    gone = s.do(out("b"))
    (dropped,) = of(gone, ev.ReservationCancelled)
    assert (dropped.combatant, dropped.reservation, dropped.reason) == ("b", reservation.id, reason)
    assert s.state.reservations == ()
    s.end_turn()
    assert s.run_round() == ["c"]


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("how", ["defeat", "remove"])
def test_r1_a_defeat_or_removal_comes_before_what_it_cancels(ruleset: str, how: str) -> None:
    # A log reads "b is defeated." then "b's reserved action is cancelled (defeated).": the
    # cause first, then its consequences.
    s = combat(ruleset, a=15, b=10, c=5)
    s.do(c.Hold(s.turn))
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("c comes close")))
    s.end_turn()
    out = ev.CombatantDefeated if how == "defeat" else ev.CombatantRemoved
    for gone_id, cancelled in (("a", ev.HoldCancelled), ("b", ev.ReservationCancelled)):
        command = c.DefeatCombatant(gone_id) if how == "defeat" else c.RemoveCombatant(gone_id)
        kinds = [type(e) for e in s.do(command)]
        assert kinds.index(out) < kinds.index(cancelled), kinds


def _pending_everything(ruleset: str) -> Story:
    """a holds, b's reservation was claimed and is resolving, d's reservation still waits, and
    c's attack is interrupted."""
    s = combat(ruleset, a=18, b=15, d=12, c=8)
    s.do(c.Hold(s.turn))
    on_attack = Trigger("c attacks", Predicate(actors=("c",), kinds=("attack",)))
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack", targets=("c",)), on_attack))
    s.end_turn()
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("someone flees")))
    s.end_turn()
    assert s.current == "c"
    declared = s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("d",))))
    window = of(declared, ev.WindowOpened)[0].window
    assert window.offered == ("b",)
    b_reservation = next(r.id for r in s.state.reservations if r.combatant == "b")
    claimed = s.do(c.ClaimReaction(window.id, "b", b_reservation))
    assert of(claimed, ev.ReactionStarted)[0].combatant == "b"
    return s


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_narrator_end_cancels_everything_pending_and_records_it(ruleset: str) -> None:
    s = _pending_everything(ruleset)
    window = s.state.window.id
    d_reservation = next(r.id for r in s.state.reservations if r.combatant == "d")
    ended = s.do(c.EndCombat())
    assert of(ended, ev.HoldCancelled)[0].combatant == "a"
    assert [(e.combatant, e.reservation) for e in of(ended, ev.ReservationCancelled)] == [
        ("d", d_reservation)
    ]
    assert [(e.combatant, e.window) for e in of(ended, ev.ReactionCancelled)] == [("b", window)]
    (action,) = of(ended, ev.ActionCancelled)
    assert (action.combatant, action.action.kind, action.reason) == ("c", "attack", "combat_ended")
    assert [(e.combatant, e.reason) for e in of(ended, ev.TurnEnded)] == [("c", "combat_ended")]
    assert names(ended)[-1] == "combat_ended"
    assert s.state.phase == "ended"
    assert s.state.holds == ()
    assert s.state.reservations == ()
    assert s.state.window is None
    assert s.state.turn is None


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_narrator_end_cancels_claims_in_a_window_still_open(ruleset: str) -> None:
    s = combat(ruleset, {"window_deadline": 10.0}, a=15, b=10, c=5)
    on_attack = Trigger("c attacks", Predicate(actors=("c",), kinds=("attack",)))
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack", targets=("c",)), on_attack))
    (reservation,) = s.state.reservations
    s.end_turn()
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack", targets=("c",)), on_attack))
    s.end_turn()
    declared = s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("b",))))
    window = of(declared, ev.WindowOpened)[0].window
    s.do(c.ClaimReaction(window.id, "a", reservation.id))
    assert s.state.window is not None
    assert s.state.window.status == "open"  # b has not answered and the deadline has not come
    ended = s.do(c.EndCombat())
    # The claimed reaction is pending too: it is cancelled and recorded as such.
    assert [(e.combatant, e.window) for e in of(ended, ev.ReactionCancelled)] == [("a", window.id)]
    assert [e.combatant for e in of(ended, ev.ActionCancelled)] == ["c"]
    assert s.state.phase == "ended"
    assert s.state.window is None


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_late_arrival_may_be_given_its_check(ruleset: str) -> None:
    s = combat(ruleset, a=15, b=10, c=5)
    given = faces(ruleset, 12)
    arrived = s.do(c.AddCombatant("x", "Newcomer", faces=given))
    (rolled,) = of(arrived, ev.InitiativeRolled)
    assert (rolled.check.rolled, rolled.check.total) == (given, 12)
    assert not s.dice.faces
    assert s.state.order == ("a", "x", "b", "c")
    assert s.run_round() == ["a", "x", "b", "c"]


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_narrator_may_end_the_combat_in_setup(ruleset: str) -> None:
    s = Story(ruleset)
    s.add("a")
    s.do(c.EndCombat())
    assert s.state.phase == "ended"
    assert s.refuse(c.AddCombatant("b", "B")).code == "combat_ended"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_only_the_narrator_ends_the_combat(ruleset: str) -> None:
    s = Story(ruleset)
    s.add("a", controller="ann", player_character=True)
    assert s.refuse(c.EndCombat(), player("ann")).code == "forbidden"


@pytest.mark.parametrize("ruleset", RULESETS)
def test_r1_combatant_fields_are_kept(ruleset: str) -> None:
    s = Story(ruleset)
    s.add(
        "kara",
        "Kara",
        controller="ann",
        player_character=True,
        init_mod=4,
        dexterity=17,
        group="wing",
        tags=("flying", "mage"),
        hidden=True,
    )
    s.add("npc", "Narrator's", init_mod=-1)
    for combatant_id in ("kara", "npc"):
        kept = s.state.get(combatant_id)
        assert kept is not None
    kara = s.state.get("kara")
    assert (
        kara.id,
        kara.name,
        kara.controller,
        kara.player_character,
        kara.init_mod,
        kara.dexterity,
        kara.group,
        kara.tags,
        kara.hidden,
    ) == ("kara", "Kara", "ann", True, 4, 17, "wing", ("flying", "mage"), True)
    npc = s.state.get("npc")
    assert (npc.controller, npc.player_character, npc.init_mod, npc.dexterity, npc.group) == (
        None,
        False,
        -1,
        10,
        None,
    )
    assert (npc.tags, npc.hidden) == ((), False)
    s.dice.push(*faces(ruleset, 12), *faces(ruleset, 9))
    s.do(c.StartCombat())
    kara = s.state.get("kara")
    assert (kara.controller, kara.init_mod, kara.dexterity, kara.group, kara.tags) == (
        "ann",
        4,
        17,
        "wing",
        ("flying", "mage"),
    )
    assert kara.hidden is True
    s.do(c.RevealCombatant("kara"))
    assert s.state.get("kara").hidden is False
