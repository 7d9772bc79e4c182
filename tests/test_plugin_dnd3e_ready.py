"""The bundled dnd3e-ready plugin (R11): the readied specials' DCs and outcomes, recorded before
the triggering action resolves, with every die lined up by the test (R2)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

import turnkeeper_dnd3e_ready
from story import QueueDice
from turnkeeper_dnd3e_ready import Dnd3eReadyPlugin
from turnkeeper_engine import SystemDice
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import ActionSpec, Predicate, Reservation, Trigger
from turnkeeper_sdk.testing import Table

TableFactory = Callable[..., Table]
NAME = "dnd3e-ready"

SPELL = Trigger("if the shaman starts casting", Predicate(actors=("shaman",), kinds=("cast",)))
FIREBALL = ActionSpec("cast", description="fireball", tags=("spell:Fireball", "spell_level:3"))
COUNTERSPELL = ActionSpec("cast", description="counterspell", tags=("counterspell",))


def goblin_cave(
    turnkeeper_table: TableFactory,
    tordek: tuple[str, ...] = (),
    mialee: tuple[str, ...] = (),
) -> tuple[Table, QueueDice]:
    """Tordek (20), Mialee (15) and the goblin shaman (10, Concentration +5, caster level 5)."""
    mine = QueueDice()
    table = turnkeeper_table("dnd3e", plugins={NAME: Dnd3eReadyPlugin(mine)}, dice=QueueDice())
    table.add("tordek", player_character=True, init_mod=1, tags=tordek)
    table.add("mialee", player_character=True, init_mod=3, tags=mialee)
    table.add("shaman", tags=("concentration:5", "caster_level:5"))
    table.do(c.RollInitiative("tordek", faces=(19,)))
    table.do(c.RollInitiative("mialee", faces=(12,)))
    table.do(c.RollInitiative("shaman", faces=(10,)))
    table.start()
    return table, mine


def ready(table: Table, action: ActionSpec, trigger: Trigger = SPELL) -> Reservation:
    table.do(c.Reserve(table.turn(), "standard", action, trigger))
    return table.of(ev.ActionReserved)[-1].reservation


def claim(table: Table, reservation: Reservation) -> list[ev.Event]:
    window = table.state.window
    assert window is not None
    return table.do(c.ClaimReaction(window.id, reservation.combatant, reservation.id))


def outcomes(events: list[ev.Event]) -> list[ev.OutcomeRecorded]:
    return [e for e in events if isinstance(e, ev.OutcomeRecorded)]


def names(events: list[ev.Event]) -> list[str]:
    return [e.name for e in events if e.name != "command_recorded"]


# --------------------------------------------------------------------- distracting a spellcaster


def test_r11_distracting_a_spellcaster_concentration_dc_10_plus_damage_plus_spell_level(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(turnkeeper_table)
    reservation = ready(table, ActionSpec("attack", targets=("shaman",), tags=("damage:7",)))
    table.end_turn()
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    mine.push(12)  # the shaman's Concentration check: 12 + 5 = 17
    (distraction,) = outcomes(claim(table, reservation))
    assert distraction.kind == "distraction"
    assert distraction.text == (
        "tordek's readied attack on shaman, if it hits for 7 damage: Concentration DC 10 + 7 + 3 "
        "= 20; shaman rolls 12 + 5 = 17: fireball is lost."
    )
    assert dict(distraction.values) == {
        "readier": "tordek",
        "caster": "shaman",
        "spell": "fireball",
        "spell_level": 3,
        "damage": 7,
        "damage_dice": "7",
        "damage_rolls": "",
        "dc": 20,
        "d20": 12,
        "concentration": 5,
        "total": 17,
        "spell_lost": True,
    }
    # The readied attack and its outcome come before the spell goes ahead.
    window = table.state.window
    assert window is not None
    finished = table.do(c.FinishReaction(window.id, "tordek"))
    assert names(finished)[-1] == "action_resolved"
    assert table.by(NAME) == ["record_outcome"]
    assert table.problems == []


def test_r11_a_distracted_caster_that_makes_the_check_keeps_the_spell(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(turnkeeper_table)
    reservation = ready(table, ActionSpec("attack", tags=("damage:1d8+3",)))
    table.end_turn()
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    mine.push(4, 15)  # damage 4 + 3 = 7; Concentration 15 + 5 = 20 against 20
    (distraction,) = outcomes(claim(table, reservation))
    assert distraction.text == (
        "tordek's readied attack on shaman, if it hits for 7 damage (1d8+3: 4): Concentration DC "
        "10 + 7 + 3 = 20; shaman rolls 15 + 5 = 20: shaman keeps fireball."
    )
    assert dict(distraction.values)["damage_rolls"] == "4"
    assert dict(distraction.values)["spell_lost"] is False


def test_r11_a_readied_attack_on_someone_else_distracts_nobody(
    turnkeeper_table: TableFactory,
) -> None:
    table, _ = goblin_cave(turnkeeper_table)
    reservation = ready(table, ActionSpec("attack", targets=("mialee",), tags=("damage:7",)))
    table.end_turn()
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    assert outcomes(claim(table, reservation)) == []


def test_r11_missing_figures_are_named_and_nothing_is_rolled(
    turnkeeper_table: TableFactory,
) -> None:
    table, _ = goblin_cave(turnkeeper_table)
    reservation = ready(table, ActionSpec("attack", targets=("shaman",)))
    table.end_turn()
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), ActionSpec("cast", tags=("spell:sleep",))))
    (missing,) = outcomes(claim(table, reservation))
    assert missing.text == (
        "tordek's readied attack on shaman: not computed, it needs the tags spell_level:N, "
        "damage:N."
    )
    assert missing.values == (("missing", "spell_level,damage"),)


def test_r11_a_figure_out_of_bounds_counts_as_missing(turnkeeper_table: TableFactory) -> None:
    table, _ = goblin_cave(turnkeeper_table)
    reservation = ready(table, ActionSpec("attack", tags=("damage:99999999",)))
    table.end_turn()
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    (missing,) = outcomes(claim(table, reservation))
    assert missing.values == (("missing", "damage"),)
    assert table.problems == []


# ------------------------------------------------------------------------ readying to counterspell


def test_r11_counterspell_spellcraft_dc_15_plus_spell_level_then_the_same_spell(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(turnkeeper_table, mialee=("spellcraft:6", "prepared:fireball"))
    table.end_turn()
    reservation = ready(table, COUNTERSPELL)
    table.end_turn()
    mine.push(13)  # Spellcraft 13 + 6 = 19 against 18
    cast = table.do(c.DeclareAction(table.turn(), FIREBALL))
    # Identified as the caster starts: before Mialee decides to use her readied action.
    (identify,) = outcomes(cast)
    assert identify.kind == "counterspell_identify"
    assert identify.text == (
        "mialee's Spellcraft check to identify the spell: 13 + 6 = 19 against DC 15 + 3 = 18: "
        "identifies fireball."
    )
    assert dict(identify.values) == {
        "readier": "mialee",
        "spell": "fireball",
        "spell_level": 3,
        "dc": 18,
        "d20": 13,
        "spellcraft": 6,
        "total": 19,
        "identified": True,
    }
    assert table.state.window is not None
    (counter,) = outcomes(claim(table, reservation))
    assert counter.text == "mialee casts fireball as a counterspell: shaman's fireball is ruined."
    assert dict(counter.values) == {"readier": "mialee", "with": "fireball", "countered": True}
    assert table.by(NAME) == ["record_outcome", "record_outcome"]


def test_r11_an_unidentified_spell_cannot_be_counterspelled(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(turnkeeper_table, mialee=("spellcraft:6", "prepared:fireball"))
    table.end_turn()
    reservation = ready(table, COUNTERSPELL)
    table.end_turn()
    mine.push(11)  # 11 + 6 = 17 against 18
    (identify,) = outcomes(table.do(c.DeclareAction(table.turn(), FIREBALL)))
    assert identify.text.endswith("17 against DC 15 + 3 = 18: cannot tell the spell.")
    (counter,) = outcomes(claim(table, reservation))
    assert counter.text == "mialee did not identify the spell: no counterspell."


def test_r11_counterspell_with_dispel_magic_makes_its_dispel_check(
    turnkeeper_table: TableFactory,
) -> None:
    mialee = ("spellcraft:6", "prepared:Dispel Magic", "caster_level:12")
    table, mine = goblin_cave(turnkeeper_table, mialee=mialee)
    table.end_turn()
    reservation = ready(table, COUNTERSPELL)
    table.end_turn()
    mine.push(18)  # identified: 24 against 18
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    mine.push(6)  # dispel check: 6 + 10 (her 12 levels count up to +10) = 16 against 11 + 5
    (counter,) = outcomes(claim(table, reservation))
    assert counter.text == (
        "mialee counterspells with dispel magic: dispel check 6 + 10 = 16 against DC 11 + 5 = 16: "
        "shaman's fireball is ruined."
    )
    assert dict(counter.values)["countered"] is True


def test_r11_a_counterspeller_without_the_spell_or_dispel_magic_counters_nothing(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(turnkeeper_table, mialee=("spellcraft:6", "prepared:sleep"))
    table.end_turn()
    reservation = ready(table, COUNTERSPELL)
    table.end_turn()
    mine.push(20)
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    (counter,) = outcomes(claim(table, reservation))
    assert counter.text == (
        "mialee has neither fireball nor dispel magic prepared: no counterspell."
    )


def test_r11_a_spellcraft_check_missed_at_the_start_is_rolled_when_the_window_closes(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(turnkeeper_table, mialee=("spellcraft:6", "prepared:fireball"))
    table.end_turn()
    reservation = ready(table, COUNTERSPELL)
    table.end_turn()
    # The plugin does not see the spell start (disabled, or its daemon restarting) …
    table.do(c.DisablePlugin(NAME, "maintenance"))
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    table.do(c.EnablePlugin(NAME))
    mine.push(15)
    identify, counter = outcomes(claim(table, reservation))
    assert identify.text.endswith("21 against DC 15 + 3 = 18: identifies fireball.")
    assert counter.text.endswith("shaman's fireball is ruined.")


# ------------------------------------------------------------------------ set against a charge


def charge(turnkeeper_table: TableFactory, damage: str) -> tuple[Table, QueueDice, Reservation]:
    mine = QueueDice()
    table = turnkeeper_table("dnd3e", plugins={NAME: Dnd3eReadyPlugin(mine)}, dice=QueueDice())
    table.add("tordek", player_character=True, init_mod=1)
    table.add("orc", init_mod=1)
    table.do(c.RollInitiative("tordek", faces=(15,)))
    table.do(c.RollInitiative("orc", faces=(9,)))
    table.start()
    charges = Trigger("if the orc charges", Predicate(actors=("orc",), kinds=("charge",)))
    longspear = ActionSpec("attack", description="longspear", tags=("set", f"damage:{damage}"))
    reservation = ready(table, longspear, charges)
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), ActionSpec("charge", targets=("tordek",))))
    return table, mine, reservation


def test_r11_a_weapon_set_against_a_charge_deals_double_damage(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine, reservation = charge(turnkeeper_table, "1d8+2")
    mine.push(5, 3)  # 3e multiplies damage by rolling it again: (5 + 2) + (3 + 2)
    (doubled,) = outcomes(claim(table, reservation))
    assert doubled.kind == "set_against_charge"
    assert doubled.text == (
        "tordek's weapon set against orc's charge: double damage if it hits, 1d8+2 rolled 2 "
        "times: (5) + (3) = 12."
    )
    assert dict(doubled.values) == {
        "readier": "tordek",
        "multiplier": 2,
        "damage_dice": "1d8+2",
        "damage_rolls_1": "5",
        "damage_rolls_2": "3",
        "damage": 12,
    }


def test_r11_a_set_weapon_with_a_fixed_damage_doubles_it(turnkeeper_table: TableFactory) -> None:
    table, _, reservation = charge(turnkeeper_table, "7")
    (doubled,) = outcomes(claim(table, reservation))
    assert doubled.text == (
        "tordek's weapon set against orc's charge: double damage if it hits, 2 x 7 = 14."
    )


# ------------------------------------------------------------------------------ several, others


def test_r11_several_readied_specials_are_recorded_in_initiative_order(
    turnkeeper_table: TableFactory,
) -> None:
    table, mine = goblin_cave(
        turnkeeper_table, tordek=("damage:5",), mialee=("spellcraft:6", "prepared:fireball")
    )
    attack = ready(table, ActionSpec("attack", targets=("shaman",)))
    table.end_turn()
    counter = ready(table, COUNTERSPELL)
    table.end_turn()
    mine.push(10)  # Mialee's Spellcraft: 10 + 6 = 16 against 18, she cannot tell the spell
    table.do(c.DeclareAction(table.turn(), FIREBALL))
    claim(table, counter)  # Mialee answers first …
    mine.push(19)  # … but Tordek's attack resolves first: Concentration 19 + 5 = 24 against 18
    events = claim(table, attack)
    distraction, countered = outcomes(events)
    assert (distraction.kind, countered.kind) == ("distraction", "counterspell")
    assert dict(distraction.values)["spell_lost"] is False
    (ordered,) = [e for e in events if isinstance(e, ev.SequenceOrdered)]
    assert ordered.sequence == ("tordek", "mialee")


def test_r11_marvel_combats_are_left_alone(turnkeeper_table: TableFactory) -> None:
    table = turnkeeper_table(
        "marvel", plugins={NAME: Dnd3eReadyPlugin(QueueDice())}, dice=QueueDice()
    )
    table.add("cap", player_character=True, init_mod=3)
    table.add("witch", init_mod=1, tags=("concentration:5",))
    table.do(c.RollInitiative("cap", faces=(6, 6, 5)))
    table.do(c.RollInitiative("witch", faces=(3, 3, 3)))
    table.start()
    casting = Trigger("she casts", Predicate(actors=("witch",), kinds=("cast",)))
    reservation = ready(table, ActionSpec("attack", tags=("damage:7", "set")), casting)
    table.end_turn()
    table.do(c.DeclareAction(table.turn(), ActionSpec("cast", "standard", tags=("spell_level:3",))))
    claim(table, reservation)
    assert table.by(NAME) == []


def test_r2_plugin_dice_are_the_system_source_unless_injected() -> None:
    assert isinstance(Dnd3eReadyPlugin().dice, SystemDice)
    assert isinstance(turnkeeper_dnd3e_ready.plugin.dice, SystemDice)


def test_dnd3e_ready_is_an_installed_entry_point() -> None:
    (point,) = entry_points(group="turnkeeper.plugins", name=NAME)
    assert point.load() is turnkeeper_dnd3e_ready.plugin
    assert point.dist is not None
    assert (point.dist.name, point.dist.version) == ("turnkeeper-dnd3e-ready", "0.1.0")
