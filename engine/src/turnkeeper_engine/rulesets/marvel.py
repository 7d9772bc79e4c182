"""Marvel Multiverse RPG: d616 initiative, Fantastic, the bonus round, surprise, holding and
reserving (R3, R4, R6–R10, R12)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from ..dice import DiceSource, roll_d616
from ..model import Check, Claim, Combatant, OptionValue
from ..order import Unit, sort_units
from .base import ClaimOrder, Ruleset


class Marvel(Ruleset):
    name: ClassVar[str] = "marvel"
    title: ClassVar[str] = "Marvel Multiverse RPG"
    catalogue: ClassVar[Mapping[str, str]] = {
        "attack": "standard",
        "power": "standard",
        "grab": "standard",
        "escape": "standard",
        "help": "standard",
        "use_item": "standard",
        "move": "movement",
        "dash": "movement",
        "stand": "movement",
    }
    action_types: ClassVar[tuple[str, ...]] = ("standard", "movement")
    options: ClassVar[Mapping[str, tuple[OptionValue, tuple[OptionValue, ...] | type]]] = {
        "reaction_refresh": ("own_turn", ("own_turn", "round_start")),
    }
    rolloff_sides: ClassVar[int] = 6
    supplied_tie_order: ClassVar[bool] = True
    surprise: ClassVar[bool] = True
    reserve_mode: ClassVar[Literal["reserve", "ready"]] = "reserve"
    claim_costs_reaction: ClassVar[bool] = True
    claim_faces: ClassVar[bool] = True
    holds_carry_over: ClassVar[bool] = True

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
        return roll_d616(dice, combatant.init_mod, edges, troubles, faces, supplied_by)

    def tie_key(self, combatant: Combatant, total: int, fantastic: bool) -> tuple[int, ...]:
        return (total, int(fantastic), combatant.init_mod, int(combatant.player_character))

    def can_spend(self, used: tuple[str, ...], action_type: str) -> bool:
        return action_type in self.action_types and action_type not in used

    def carries(
        self, reserved_type: str, action_type: str, options: Mapping[str, OptionValue]
    ) -> bool:
        # A standard action can do what a movement action does, never the reverse (seed text:
        # "they cannot reserve a movement action to make an Attack").
        return action_type == reserved_type or (
            reserved_type == "standard" and action_type == "movement"
        )

    def reservable_types(self, options: Mapping[str, OptionValue]) -> tuple[str, ...]:
        return ("standard", "movement")

    def holder_priority(self, combatant: Combatant, hold_seq: int) -> tuple[int, ...]:
        return (hold_seq,)

    def bonus_round(self, order: Sequence[Combatant]) -> tuple[str, ...]:
        # R7: every active combatant whose check was Fantastic, unless it is surprised (R8).
        return tuple(
            c.id
            for c in order
            if c.status == "active"
            and c.check is not None
            and c.check.fantastic
            and not c.surprised
        )

    def order_claims(
        self, claims: Sequence[tuple[Combatant, Claim]], order: tuple[str, ...], dice: DiceSource
    ) -> ClaimOrder:
        if len(claims) < 2:
            return super().order_claims(claims, order, dice)
        # R12: a fresh check for everyone involved, for this sequence only; no bonus round.
        checks: list[tuple[str, Check]] = []
        units = []
        for c, claim in claims:
            check = self.roll(c, dice, faces=claim.faces, supplied_by=claim.supplied_by)
            checks.append((c.id, check))
            units.append(Unit((c.id,), self.tie_key(c, check.total, check.fantastic)))
        ordered, rolloffs = sort_units(units, dice, self.rolloff_sides)
        return ClaimOrder(tuple(u.members[0] for u in ordered), tuple(checks), tuple(rolloffs))


MARVEL = Marvel()
