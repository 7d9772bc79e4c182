"""The narrated log reads as sentences a table says: no protocol codes, no internal ids.

Rule words travel as protocol values (``combat_ended``, ``full``, ``declare_action``); the log
shows each in the reader's language, English included. An action the table did not describe is
named by its kind, in that language too.
"""

from __future__ import annotations

import re

import pytest

from story import Story, player
from turnkeeper import i18n
from turnkeeper.narrate import narrate
from turnkeeper_engine import BUNDLED_RULES, State, evolve
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts

CODE = re.compile(r"\b[a-z]+_[a-z_]+\b")
"""A protocol value such as ``combat_ended`` or ``bonus_round``: no English word has ``_``."""


def _told(story: Story, locale: str, since: int = 0) -> list[str]:
    """The lines of ``story``'s events from ``since`` on, told as a reader sees them."""
    state, lines = State(), []
    for i, event in enumerate(story.log):
        state = evolve(state, event)
        line = narrate(event, state, locale, rules=BUNDLED_RULES)
        if line and i >= since:
            lines.append(line.strip())
    return lines


def _marvel() -> Story:
    """Cap 15 (a player's, rolled by steve) and a Hydra agent 10 (the narrator's), round 1."""
    s = Story("marvel")
    s.add("cap", "Captain America", controller="steve", player_character=True, init_mod=3)
    s.add("agent", "Hydra agent", init_mod=1)
    s.do(c.RollInitiative("cap", faces=(5, 4, 3)), player("steve"))
    s.roll("agent", 2, 3, 4)
    s.do(c.StartCombat())
    return s


def test_every_rule_word_has_an_english_word_that_is_not_a_code() -> None:
    for kind, words in i18n.TERMS.items():
        for code, word in words.items():
            assert word, (kind, code)
            assert not CODE.search(word), (kind, code, word)
            assert i18n.term("en", kind, code) == word


def test_english_rule_words_replace_the_codes_in_the_log() -> None:
    s = _marvel()
    s.do(c.EndCombat())
    told = _told(s, "en")
    assert "Captain America's turn ends (end of combat)." in told
    assert not [line for line in told if CODE.search(line)], told


def test_the_combat_is_named_with_its_ruleset_s_title() -> None:
    s = Story("dnd3e")
    assert _told(s, "en") == ["== Combat 'test' (D&D 3e SRD) =="]
    assert _told(Story("marvel"), "pt-BR") == ["== Combate 'test' (Marvel Multiverse RPG) =="]


def test_dice_the_narrator_supplied_read_by_the_narrator() -> None:
    told = _told(_marvel(), "en")
    assert "Captain America initiative: d616 [5, 4, 3] +3 = 15 (dice supplied by steve)" in told
    assert "Hydra agent initiative: d616 [2, 3, 4] +1 = 10 (dice supplied by the narrator)" in told
    told = _told(_marvel(), "pt-BR")
    assert "Agente: Iniciativa" not in told
    assert any(line.endswith("(dados rolados pelo narrador)") for line in told), told
    assert any(line.endswith("(dados rolados por steve)") for line in told), told


def test_an_action_without_a_description_is_named_by_its_kind_in_the_reader_s_words() -> None:
    s = _marvel()
    s.end_turn()  # Captain America
    since = len(s.log)
    s.do(c.DeclareAction(s.turn, ActionSpec("attack", targets=("cap",))))
    s.do(c.DeclareAction(s.turn, ActionSpec("move")))
    assert _told(s, "en", since) == [
        "Hydra agent: attack targeting Captain America [standard action].",
        "Hydra agent: move [movement action].",
    ]
    assert _told(s, "pt-BR", since) == [
        "Hydra agent: ataque (alvo: Captain America) [ação padrão].",
        "Hydra agent: movimento [ação de movimento].",
    ]


def test_a_described_action_reads_as_the_table_wrote_it_with_its_action_type() -> None:
    s = Story("dnd3e")
    s.add("wizard", "Mialee", init_mod=3)
    s.roll("wizard", 5)
    s.do(c.StartCombat())
    since = len(s.log)
    s.do(c.DeclareAction(s.turn, ActionSpec("run", description="runs for the door")))
    assert _told(s, "en", since) == ["Mialee runs for the door [full-round action]."]


def test_an_undo_says_what_it_takes_back_not_the_command_s_name() -> None:
    s = _marvel()
    s.do(c.DeclareAction(s.turn, ActionSpec("attack", description="punches")))
    since = len(s.log)
    s.do(c.Undo())
    assert _told(s, "en", since) == ["(the narrator undoes the action)"]
    assert _told(s, "pt-BR", since) == ["(o narrador desfaz a ação)"]


def test_every_command_an_undo_can_take_back_has_words() -> None:
    assert set(i18n.TERMS["undone"]) == set(c.COMMANDS) - {"undo", "end_combat"}


def test_every_action_kind_of_the_bundled_rulesets_has_words() -> None:
    for name, rules in BUNDLED_RULES.rulesets.items():
        assert set(rules.catalogue) <= set(i18n.TERMS["action_kind"]), name


def test_a_custom_condition_is_never_told_by_its_type() -> None:
    s = _marvel()
    since = len(s.log)
    s.do(c.ApplyCondition("agent", "custom", rounds=1))
    (applied,) = [e for e in s.log[since:] if isinstance(e, ev.ConditionApplied)]
    s.do(c.RemoveCondition(applied.condition.id))
    told = _told(s, "en", since)
    assert told == [
        "Hydra agent gets a custom condition.",
        "Hydra agent's condition is removed (narrator's decision).",
    ]
    assert not [line for line in told if "custom)" in line or "no longer custom" in line]


def test_a_reserved_action_reads_with_its_trigger() -> None:
    s = _marvel()
    since = len(s.log)
    corner = Trigger("anyone comes around the corner", Predicate(events=("move",)))
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack", description="punch"), corner))
    assert _told(s, "en", since) == [
        "Captain America reserves a standard action (punch), with the trigger: anyone comes "
        "around the corner"
    ]


def test_the_group_order_names_its_members_not_the_group_id() -> None:
    s = Story("marvel")
    s.add("agent1", "Hydra agent 1", group="hydra")
    s.add("agent2", "Hydra agent 2", group="hydra")
    since = len(s.log)
    s.do(c.ReorderGroup("hydra", ("agent2", "agent1")))
    assert _told(s, "en", since) == ["The group acts in this order: Hydra agent 2, Hydra agent 1."]


@pytest.mark.parametrize("how", ["defeat", "remove"])
def test_r1_a_defeated_reactor_is_told_defeated_before_its_reaction_is_cancelled(
    how: str,
) -> None:
    """The Mandarin: "is defeated", then "the reaction is cancelled", never the other way."""
    s = _marvel()
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("the agent attacks")))
    s.end_turn()
    s.do(c.Reserve(s.turn, "standard", ActionSpec("attack"), Trigger("the agent attacks")))
    attack = TriggerFacts("announced", "agent", "attack", text="the agent attacks")
    s.do(c.AnnounceTrigger(attack, offer=("cap", "agent")))
    window = s.state.window
    assert window is not None
    # Cap's fresh check beats the agent's: the agent's reaction waits its turn (R12).
    for who, dice in (("cap", (6, 6, 5)), ("agent", (1, 1, 2))):
        reservation = next(r.id for r in s.state.reservations if r.combatant == who)
        s.do(c.ClaimReaction(window.id, who, reservation, faces=dice))
    since = len(s.log)
    s.do(c.DefeatCombatant("agent") if how == "defeat" else c.RemoveCombatant("agent"))
    told = _told(s, "en", since)
    gone = "Hydra agent is defeated." if how == "defeat" else "Hydra agent leaves the combat."
    reason = "defeated" if how == "defeat" else "left the combat"
    cancelled = f"Hydra agent's reaction is cancelled ({reason})."
    assert told.index(gone) < told.index(cancelled), told
