"""R7 The bonus round (marvel): round 0 for Fantastic, non-surprised combatants only."""

from __future__ import annotations

from story import Story, names, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, TriggerFacts


def seed_bank_robbery() -> Story:
    """The seed's example: Spider-Man 20 and Doctor Octopus 14 are Fantastic; Sabretooth 17 and
    Wolverine 15 are not. Added out of order so the bonus round has to follow initiative."""
    story = Story("marvel")
    for cid, mod, faces in (
        ("docock", 1, (3, 4, 1)),  # 3 + 4 + M(6) + 1 = 14, Fantastic
        ("wolverine", 3, (2, 4, 6)),  # 15
        ("sabretooth", 2, (4, 5, 6)),  # 17
        ("spidey", 3, (5, 6, 1)),  # 5 + 6 + M(6) + 3 = 20, Fantastic
    ):
        story.add(cid, init_mod=mod)
        story.roll(cid, *faces)
    return story


def test_r7_seed_bonus_round_for_fantastic_in_initiative_order() -> None:
    story = seed_bank_robbery()
    events = story.do(c.StartCombat())
    started = of(events, ev.CombatStarted)[0]
    assert started.order == ("spidey", "sabretooth", "wolverine", "docock")
    assert started.bonus == ("spidey", "docock")
    assert of(events, ev.RoundStarted)[0].round == 0
    assert story.state.phase == "bonus_round"
    assert [story.state.get(i).check.total for i in started.order] == [20, 17, 15, 14]  # type: ignore[union-attr]
    assert story.run_round() == ["spidey", "docock"]
    assert story.state.round == 1
    assert story.state.phase == "rounds"
    assert story.run_round() == ["spidey", "sabretooth", "wolverine", "docock"]


def test_r7_bonus_round_ends_into_round_1_exactly_once() -> None:
    story = seed_bank_robbery()
    story.do(c.StartCombat())
    story.end_turn()
    events = story.end_turn()  # Doctor Octopus ends the bonus round
    assert names(events) == ["turn_ended", "round_ended", "round_started", "turn_started"]
    assert of(events, ev.RoundEnded)[0].round == 0
    assert of(events, ev.RoundStarted)[0].round == 1
    assert of(events, ev.TurnStarted)[0].combatant == "spidey"


def test_r7_no_fantastic_no_bonus_round() -> None:
    story = Story("marvel")
    for cid, faces in (("ana", (6, 6, 6)), ("ben", (2, 3, 4))):
        story.add(cid)
        story.roll(cid, *faces)
    events = story.do(c.StartCombat())
    assert of(events, ev.CombatStarted)[0].bonus == ()
    assert [e.round for e in of(events, ev.RoundStarted)] == [1]
    assert story.state.phase == "rounds"
    assert story.run_round() == ["ana", "ben"]


def test_r7_fresh_sequence_checks_never_grant_a_bonus_round() -> None:
    story = Story("marvel")
    for cid, faces in (("ana", (5, 5, 5)), ("ben", (3, 4, 5))):
        story.add(cid)
        story.roll(cid, *faces)
    story.do(c.StartCombat())
    assert story.state.round == 1
    story.do(c.AnnounceTrigger(TriggerFacts("announced", text="the floor gives"), ("ana", "ben")))
    window = story.state.window
    assert window is not None
    story.dice.push(2, 3, 1, 4, 4, 4)  # Ana's fresh check is Fantastic: 2 + 3 + M(6) = 11
    story.do(c.ClaimReaction(window.id, "ana", action=ActionSpec("attack")))
    events = story.do(c.ClaimReaction(window.id, "ben", action=ActionSpec("attack")))
    checks = dict(of(events, ev.SequenceOrdered)[0].checks)
    assert checks["ana"].fantastic
    assert (checks["ana"].total, checks["ben"].total) == (11, 12)
    story.do(c.FinishReaction(window.id, "ben"))
    events = story.do(c.FinishReaction(window.id, "ana"))
    assert "round_started" not in names(events)
    assert (story.state.round, story.state.phase, story.state.bonus) == (1, "rounds", ())
    assert story.current == "ana"
    story.end_turn()
    events = story.end_turn()
    assert [e.round for e in of(events, ev.RoundStarted)] == [2]
    assert story.run_round() == ["ana", "ben"]


def test_r7_dnd3e_never_has_a_bonus_round() -> None:
    story = Story("dnd3e")
    for cid, face in (("ana", 20), ("ben", 1)):
        story.add(cid)
        story.roll(cid, face)
    events = story.do(c.StartCombat())
    assert of(events, ev.CombatStarted)[0].bonus == ()
    assert [e.round for e in of(events, ev.RoundStarted)] == [1]
    assert story.state.phase == "rounds"
    assert story.run_round() == ["ana", "ben"]
