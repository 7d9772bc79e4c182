"""R8 Surprise (marvel): at combat start a trouble and no bonus round; later an edge for a round."""

from __future__ import annotations

from story import Story, of
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Reroll, Trigger, TriggerFacts


def test_r8_surprised_at_start_has_one_trouble_on_the_check() -> None:
    story = Story("marvel")
    story.add("doom", init_mod=2)
    story.do(c.MarkSurprised("doom"))
    # 4, 5, M: the trouble rerolls the highest die, the M (it counts 6), and keeps the worse 3.
    events = story.roll("doom", 4, 5, 1, 3)
    check = of(events, ev.InitiativeRolled)[0].check
    assert check.troubles == 1
    assert check.rolled == (4, 5, 1)
    assert check.rerolls == (Reroll("trouble", 2, 1, 3, 3),)
    assert check.faces == (4, 5, 3)
    assert (check.total, check.fantastic) == (14, False)


def test_r8_surprised_trouble_applies_when_start_combat_rolls() -> None:
    story = Story("marvel")
    story.add("doom")
    story.add("sue")
    story.do(c.MarkSurprised("doom"))
    story.dice.push(6, 2, 3, 1, 2, 3, 1)  # Doom 6, 2, 3, the trouble turns the 6 into 1; Sue
    events = story.do(c.StartCombat())
    checks = {e.combatant: e.check for e in of(events, ev.InitiativeRolled)}
    assert checks["doom"].troubles == 1
    assert checks["doom"].rerolls == (Reroll("trouble", 0, 6, 1, 1),)
    assert checks["doom"].total == 6
    assert checks["sue"].troubles == 0
    assert checks["sue"].total == 11  # 2 + 3 + M(6), Fantastic
    assert of(events, ev.CombatStarted)[0].bonus == ("sue",)


def test_r8_surprised_at_start_gets_no_bonus_round_turn_even_if_fantastic() -> None:
    story = Story("marvel")
    story.add("doom", init_mod=3)
    story.add("sue")
    story.do(c.MarkSurprised("doom"))
    # 6, 6, M: the trouble rerolls the M and comes up M again: still Fantastic.
    check = of(story.roll("doom", 6, 6, 1, 1), ev.InitiativeRolled)[0].check
    assert (check.fantastic, check.troubles, check.total) == (True, 1, 21)
    story.roll("sue", 2, 2, 1)  # 10, Fantastic
    events = story.do(c.StartCombat())
    started = of(events, ev.CombatStarted)[0]
    assert started.order == ("doom", "sue")
    assert started.bonus == ("sue",)
    assert story.run_round() == ["sue"]
    assert story.run_round() == ["doom", "sue"]


def test_r8_surprised_fantastic_alone_means_no_bonus_round() -> None:
    story = Story("marvel")
    story.add("doom")
    story.add("sue")
    story.do(c.MarkSurprised("doom"))
    story.roll("doom", 6, 6, 1, 1)
    story.roll("sue", 2, 2, 2)
    events = story.do(c.StartCombat())
    assert of(events, ev.CombatStarted)[0].bonus == ()
    assert [e.round for e in of(events, ev.RoundStarted)] == [1]


def test_r8_mark_surprised_after_rolling_is_already_rolled() -> None:
    story = Story("marvel")
    story.add("doom")
    story.roll("doom", 2, 3, 4)
    assert story.refuse(c.MarkSurprised("doom")).code == "already_rolled"


def test_r8_dnd3e_has_no_surprise() -> None:
    story = Story("dnd3e")
    story.add("orc")
    assert story.refuse(c.MarkSurprised("orc")).code == "not_in_ruleset"
    story.add("elf")
    story.roll("orc", 10)
    story.roll("elf", 5)
    story.do(c.StartCombat())
    assert story.refuse(c.Surprise("elf", ("orc",))).code == "not_in_ruleset"


def fantastic_four() -> Story:
    """Sue 18, Reed 15, Doom 12, Ben 9; nobody Fantastic. Round 1, Sue's turn."""
    story = Story("marvel")
    for cid, faces in (
        ("sue", (6, 6, 6)),
        ("reed", (4, 5, 6)),
        ("doom", (3, 4, 5)),
        ("ben", (2, 3, 4)),
    ):
        story.add(cid)
        story.roll(cid, *faces)
    story.do(c.StartCombat())
    assert story.current == "sue"
    return story


def attack(story: Story, target: str) -> tuple[str, ...]:
    events = story.do(c.DeclareAction(story.turn, ActionSpec("attack", targets=(target,))))
    return of(events, ev.ActionDeclared)[0].edges


def surprised(story: Story, target: str) -> tuple[str, ...] | None:
    for k in story.state.conditions:
        if k.type == "surprised" and k.target == target:
            return k.surprisers
    return None


def test_r8_mid_combat_surprise_gives_condition_listing_surprisers() -> None:
    story = fantastic_four()
    events = story.do(c.Surprise("doom", ("sue",)))
    condition = of(events, ev.ConditionApplied)[0].condition
    assert (condition.type, condition.target, condition.surprisers) == (
        "surprised",
        "doom",
        ("sue",),
    )


def test_r8_surpriser_has_edge_on_attacks_against_target_only() -> None:
    story = fantastic_four()
    story.do(c.Surprise("doom", ("sue",)))
    assert attack(story, "doom") == ("surprised:doom",)
    story.end_turn()
    assert attack(story, "doom") == ()  # Reed did not surprise Doom
    story.end_turn()
    story.end_turn()
    story.end_turn()
    assert story.current == "sue"
    assert story.state.round == 2


def test_r8_surpriser_has_no_edge_against_someone_else() -> None:
    story = fantastic_four()
    story.do(c.Surprise("doom", ("sue",)))
    assert attack(story, "ben") == ()


def test_r8_surprise_ends_at_start_of_surprisers_next_turn() -> None:
    story = fantastic_four()
    story.do(c.Surprise("doom", ("sue",)))
    story.end_turn()  # Reed
    story.end_turn()  # Doom
    story.end_turn()  # Ben
    assert surprised(story, "doom") == ("sue",)
    events = story.end_turn()  # round 2: Sue's next turn starts
    assert story.current == "sue"
    expired = of(events, ev.ConditionExpired)
    assert [e.combatant for e in expired] == ["doom"]
    assert surprised(story, "doom") is None
    assert attack(story, "doom") == ()


def test_r8_surprise_before_surprisers_turn_ends_when_that_turn_starts() -> None:
    story = fantastic_four()
    story.do(c.Surprise("reed", ("doom",)))  # in Sue's turn; Doom has not acted yet
    story.end_turn()
    assert surprised(story, "reed") == ("doom",)
    events = story.end_turn()
    assert story.current == "doom"
    assert [e.combatant for e in of(events, ev.ConditionExpired)] == ["reed"]


def test_r8_several_surprisers_latest_of_their_next_turns() -> None:
    story = fantastic_four()
    story.end_turn()  # Reed's turn: Sue and Ben surprise Doom
    story.do(c.Surprise("doom", ("sue", "ben")))
    story.end_turn()  # Doom
    events = story.end_turn()  # Ben's next turn starts: Sue's has not come yet
    assert story.current == "ben"
    assert of(events, ev.ConditionExpired) == []
    assert surprised(story, "doom") == ("sue", "ben")
    assert attack(story, "doom") == ("surprised:doom",)
    events = story.end_turn()  # round 2, Sue's next turn: the latest
    assert story.current == "sue"
    assert [e.combatant for e in of(events, ev.ConditionExpired)] == ["doom"]
    assert surprised(story, "doom") is None


def test_r8_second_surpriser_added_later_extends_to_the_latest() -> None:
    story = fantastic_four()
    story.end_turn()  # Reed's turn
    story.do(c.Surprise("doom", ("ben",)))
    story.do(c.Surprise("doom", ("sue",)))
    assert surprised(story, "doom") == ("ben", "sue")
    story.end_turn()
    story.end_turn()  # Ben's turn starts: Sue's turn is still to come
    assert surprised(story, "doom") == ("ben", "sue")
    story.end_turn()
    assert surprised(story, "doom") is None


def test_r8_surpriser_reacting_with_an_attack_has_the_edge_too() -> None:
    """The edge is on attacks against the surprised target, reactions included."""
    story = fantastic_four()
    reserved = ActionSpec("attack", description="strike from hiding", targets=("doom",))
    story.do(c.Reserve(story.turn, "standard", reserved, Trigger("when Doom moves")))
    story.end_turn()
    story.end_turn()
    story.do(c.Surprise("doom", ("sue",)))
    opened = story.do(c.AnnounceTrigger(TriggerFacts("announced", "doom", "move"), offer=("sue",)))
    window = of(opened, ev.WindowOpened)[0].window
    reservation = story.state.reservations[0].id
    events = story.do(c.ClaimReaction(window.id, "sue", reservation))
    assert of(events, ev.ReactionStarted)[0].edges == ("surprised:doom",)
