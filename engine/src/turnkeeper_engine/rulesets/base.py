"""The ruleset interface: everything that differs between game systems sits behind it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from ..dice import DiceSource
from ..model import Check, Combatant, OptionValue

COMMON_OPTIONS: Mapping[str, tuple[OptionValue, tuple[OptionValue, ...] | type]] = {
    # name: (default, allowed values or the type a value must have)
    "window_deadline": (0.0, float),
    "turn_time_limit": (None, float),
    "turn_warning": (10.0, float),
    "turn_expiry": ("end_turn", ("end_turn", "hold")),
}


class Ruleset:
    """A game system's initiative rules. Subclass it and put an instance in the rule book
    (``RuleBook.with_rulesets``, or a plugin's ``turnkeeper_rulesets``) to add a system; the
    engine asks it, never the other way round."""

    name: ClassVar[str]
    title: ClassVar[str]
    catalogue: ClassVar[Mapping[str, str]]
    """Action kind → the action type it needs (R6)."""
    action_types: ClassVar[tuple[str, ...]]
    options: ClassVar[Mapping[str, tuple[OptionValue, tuple[OptionValue, ...] | type]]] = {}
    rolloff_sides: ClassVar[int]
    supplied_tie_order: ClassVar[bool]
    """Whether players and narrator may order exact ties before a roll-off (R4)."""
    bonus_round: ClassVar[bool] = False
    surprise: ClassVar[bool] = False
    reserve_mode: ClassVar[Literal["reserve", "ready"]]
    claim_costs_reaction: ClassVar[bool]
    fresh_sequence_checks: ClassVar[bool]
    """marvel: simultaneous claims roll fresh checks; otherwise current initiative order (R12)."""
    readied_moves_initiative: ClassVar[bool] = False
    holds_carry_over: ClassVar[bool]
    """marvel holds last past the round's end; a dnd3e delay never does (R9)."""
    refocus: ClassVar[bool] = False
    mutual_after_higher_last: ClassVar[bool] = False
    """Two holders each waiting for the other: whether higher priority goes last (R9)."""

    def all_options(self) -> Mapping[str, tuple[OptionValue, tuple[OptionValue, ...] | type]]:
        return {**COMMON_OPTIONS, **self.options}

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
        raise NotImplementedError

    def tie_key(self, combatant: Combatant, total: int, fantastic: bool) -> tuple[int, ...]:
        """Sort key, higher first, for a combatant at ``total`` (R4). Equal keys are exact ties."""
        raise NotImplementedError

    def action_type(self, kind: str) -> str | None:
        return self.catalogue.get(kind)

    def can_spend(self, used: tuple[str, ...], action_type: str) -> bool:
        """Whether a turn that has spent ``used`` can still take an action of ``action_type``."""
        raise NotImplementedError

    def carries(
        self, reserved_type: str, action_type: str, options: Mapping[str, OptionValue]
    ) -> bool:
        """Whether a reserved/readied ``reserved_type`` can carry an action of ``action_type``."""
        raise NotImplementedError

    def reservable_types(self, options: Mapping[str, OptionValue]) -> tuple[str, ...]:
        """The action types a turn can spend on reserving or readying."""
        raise NotImplementedError

    def delay_floor(self, combatant: Combatant, options: Mapping[str, OptionValue]) -> int | None:
        """The lowest number a holder may name, or None for no floor."""
        return None

    def holder_priority(self, combatant: Combatant, hold_seq: int) -> tuple[int, ...]:
        """Among holders wanting the same moment, lower key goes first (R9)."""
        raise NotImplementedError

    def refocus_number(self, combatant: Combatant) -> int:
        raise NotImplementedError
