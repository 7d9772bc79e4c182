"""D&D 3e SRD: d20 initiative and the special initiative actions Delay, Ready and Refocus
(R4, R6, R9, R11, R14)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from .. import events as ev
from ..dice import DiceSource, roll_d20
from ..model import Check, Combatant, OptionValue, State, Window
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
    holds_carry_over: ClassVar[bool] = False
    refocus: ClassVar[bool] = True

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

    def mutual_wait_priority(self, combatant: Combatant, hold_seq: int) -> tuple[int, ...]:
        # R9: of two delayers each waiting for the other, the higher initiative bonus goes last.
        return tuple(-k for k in self.holder_priority(combatant, hold_seq))

    def readied_reaction(
        self, state: State, readier: str, window: Window, reserved_round: int
    ) -> list[ev.Event]:
        return _readier_moves(state, readier, window, reserved_round)

    def readied_pass(self, state: State, readier: str, window: Window) -> list[ev.Event]:
        if readier not in window.offered:
            return []
        # R11: in a later round the trigger alone moves the readier up and costs its regular
        # turn, "whether that action is taken or not".
        for r in state.reservations:
            if r.combatant == readier and r.round < (state.round or 0):
                return [
                    ev.ReservationUsed(readier, r.id),
                    *_readier_moves(state, readier, window, r.round),
                ]
        return []


def _readier_moves(state: State, readier: str, w: Window, reserved_round: int) -> list[ev.Event]:
    """R11: the readier's place becomes immediately ahead of the triggering combatant, at its
    count; in a later round, before its normal place, it also loses that round's regular turn."""
    trigger_actor = w.facts.actor
    if trigger_actor is None or trigger_actor == readier or trigger_actor not in state.order:
        return []
    other = state.get(trigger_actor)
    assert other is not None
    assert other.place is not None
    rest = tuple(i for i in state.order if i != readier)
    index = rest.index(trigger_actor)
    order = (*rest[:index], readier, *rest[index:])
    moved: list[ev.Event] = [ev.PlaceChanged(readier, other.place, order, "readied_action")]
    round_no = state.round or 0
    if reserved_round < round_no and readier not in state.reached:
        moved.append(ev.TurnForgone(readier, round_no))
    return moved


DND3E = DnD3e()
