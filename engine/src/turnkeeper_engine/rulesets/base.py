"""The ruleset interface: everything that differs between game systems sits behind it.

A ruleset says two kinds of thing. What a system has, as class attributes the engine reads to
accept or refuse a command (surprise, refocus, ties the table orders, claims with their own
faces) and to word its rules (``reserve_mode``, ``holds_carry_over``). And how its rules play,
as methods the engine calls at each rule family's moment: the check and the tie chain (R2–R4),
the bonus round (R7), what a turn can spend (R6), reservations (R10, R11), holds (R9), the
order of simultaneous reactions (R12). The base class plays the common rules; a system
overrides the methods where it differs, so a third system is a subclass (and, in the daemon, a
plugin's ``turnkeeper_rulesets``), never an edit of the engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from .. import events as ev
from ..dice import DiceSource
from ..model import Check, Claim, Combatant, OptionValue, RollOff, State, Window

COMMON_OPTIONS: Mapping[str, tuple[OptionValue, tuple[OptionValue, ...] | type]] = {
    # name: (default, allowed values or the type a value must have)
    "window_deadline": (0.0, float),
    "turn_time_limit": (None, float),
    "turn_warning": (10.0, float),
    "turn_expiry": ("end_turn", ("end_turn", "hold")),
}


@dataclass(frozen=True, slots=True)
class ClaimOrder:
    """The order the claims of one window resolve in (R12): the claimants, first first, with
    the fresh checks rolled to order them, if any, and those checks' roll-offs."""

    sequence: tuple[str, ...]
    checks: tuple[tuple[str, Check], ...] = ()
    rolloffs: tuple[RollOff, ...] = ()


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
    surprise: ClassVar[bool] = False
    """Whether the system has surprise (R8) and, with it, edges and troubles on checks (R3)."""
    reserve_mode: ClassVar[Literal["reserve", "ready"]]
    """marvel reserves an action, and may claim a reaction without one; dnd3e readies one,
    and only a readied action answers a trigger (R10, R11)."""
    claim_costs_reaction: ClassVar[bool]
    claim_faces: ClassVar[bool] = False
    """Whether a claim may carry the faces of the fresh check ``order_claims`` rolls for it."""
    holds_carry_over: ClassVar[bool]
    """marvel holds last past the round's end; a dnd3e delay never does (R9)."""
    refocus: ClassVar[bool] = False

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

    def bonus_round(self, order: Sequence[Combatant]) -> tuple[str, ...]:
        """Who takes a bonus round before round 1, in initiative order, ``order`` being the
        combatants as the combat starts (R7). Nobody by default: round 1 comes first."""
        return ()

    def order_claims(
        self, claims: Sequence[tuple[Combatant, Claim]], order: tuple[str, ...], dice: DiceSource
    ) -> ClaimOrder:
        """The order a window's claims resolve in (R12), ``claims`` as they were made and
        ``order`` the initiative order now. By default the initiative order, a claimant
        outside it last."""
        position = {i: n for n, i in enumerate(order)}
        claimants = [c.id for c, _ in claims]
        return ClaimOrder(tuple(sorted(claimants, key=lambda i: position.get(i, len(position)))))

    def mutual_wait_priority(self, combatant: Combatant, hold_seq: int) -> tuple[int, ...]:
        """Two holders each waiting to go just after the other: the lower key goes first
        (R9). By default the holder priority."""
        return self.holder_priority(combatant, hold_seq)

    def readied_reaction(
        self, state: State, readier: str, window: Window, reserved_round: int
    ) -> list[ev.Event]:
        """What taking a reserved or readied action (from ``reserved_round``) does beyond the
        reaction itself, as events applied in order (R10, R11). Nothing by default."""
        return []

    def readied_pass(self, state: State, readier: str, window: Window) -> list[ev.Event]:
        """What letting a trigger pass does to an offered reserver or readier, as events
        applied in order (R11). Nothing by default: its reservation waits for the next one."""
        return []
