"""D&D 3e SRD: d20 initiative and the special initiative actions Delay, Ready and Refocus
(R4, R6, R9, R11, R14)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from ..dice import DiceSource, roll_d20
from ..model import Check, Combatant, OptionValue
from .base import Ruleset

DELAY_FLOOR_BASE = -10
"""SRD 3.0: a delayer can lower its initiative to -10 minus its initiative bonus, no further."""
REFOCUS_ROLL = 20
"""SRD: refocus positions the character as though it had rolled a 20."""


class DnD3e(Ruleset):
    name: ClassVar[str] = "dnd3e"
    title: ClassVar[str] = "D&D 3e SRD"
    catalogue: ClassVar[Mapping[str, str]] = {
        "attack": "standard",
        "cast": "standard",
        "aid_another": "standard",
        "total_defense": "standard",
        "move": "move",
        "draw_weapon": "move",
        "stand_up": "move",
        "charge": "full",
        "full_attack": "full",
        "run": "full",
        "withdraw": "full",
        "refocus": "full",
        "speak": "free",
        "drop_item": "free",
    }
    action_types: ClassVar[tuple[str, ...]] = ("standard", "move", "full", "free")
    options: ClassVar[Mapping[str, tuple[OptionValue, tuple[OptionValue, ...] | type]]] = {
        "ready": ("3.0", ("3.0", "3.5")),
        "delay": ("3.0", ("3.0", "3.5")),
    }
    rolloff_sides: ClassVar[int] = 20
    supplied_tie_order: ClassVar[bool] = False
    reserve_mode: ClassVar[Literal["reserve", "ready"]] = "ready"
    claim_costs_reaction: ClassVar[bool] = False
    fresh_sequence_checks: ClassVar[bool] = False
    readied_moves_initiative: ClassVar[bool] = True
    holds_carry_over: ClassVar[bool] = False
    refocus: ClassVar[bool] = True
    mutual_after_higher_last: ClassVar[bool] = True

    def roll(
        self,
        combatant: Combatant,
        dice: DiceSource,
        *,
        edges: int = 0,
        troubles: int = 0,
        faces: tuple[int, ...] | None = None,
        supplied_by: str | None = None,
    ) -> Check:
        return roll_d20(dice, combatant.init_mod, faces, supplied_by)

    def tie_key(self, combatant: Combatant, total: int, fantastic: bool) -> tuple[int, ...]:
        return (total, combatant.init_mod, combatant.dexterity)

    def can_spend(self, used: tuple[str, ...], action_type: str) -> bool:
        if action_type == "free":
            return True
        if "full" in used:
            return False
        moves = used.count("move")
        standard_spent = "standard" in used or moves >= 2
        if action_type == "full":
            return not used or all(u == "free" for u in used)
        if action_type == "standard":
            return not standard_spent
        if action_type == "move":
            # A second move action takes the place of the standard action.
            return moves == 0 or not standard_spent
        return False

    def carries(
        self, reserved_type: str, action_type: str, options: Mapping[str, OptionValue]
    ) -> bool:
        # 3.0 readies only partial actions (a standard or a move); 3.5 adds free actions.
        allowed = (
            ("standard", "move", "free")
            if options.get("ready") == "3.5"
            else (
                "standard",
                "move",
            )
        )
        return action_type in allowed

    def reservable_types(self, options: Mapping[str, OptionValue]) -> tuple[str, ...]:
        return ("standard",)

    def delay_floor(self, combatant: Combatant, options: Mapping[str, OptionValue]) -> int | None:
        if options.get("delay") == "3.5":
            return None
        return DELAY_FLOOR_BASE - combatant.init_mod

    def holder_priority(self, combatant: Combatant, hold_seq: int) -> tuple[int, ...]:
        return (-combatant.init_mod, -combatant.dexterity, hold_seq)

    def refocus_number(self, combatant: Combatant) -> int:
        return REFOCUS_ROLL + combatant.init_mod


DND3E = DnD3e()
