"""A bundled bot policy: :class:`SensibleBot` plays any combatant of either bundled ruleset.

It fights: each turn it attacks an enemy (another side: a ``side:<name>`` tag, else player
characters against everyone else), and now and then does what the rules make interesting:

- **holds** (marvel) or **delays** (dnd3e) its turn before acting, saying with the hold when
  it takes the held turn: just before or just after another combatant (R9);
- **reserves** (marvel, its standard action) or **readies** (dnd3e) an attack with a
  machine-readable trigger: an enemy attacks (or, dnd3e, starts casting), an enemy moves, or
  someone attacks it (R10, R11), and moves if its movement is left;
- **refocuses** (dnd3e, R14);
- claims the reaction when a window is offered (sometimes passes), and in marvel now and then
  joins a window it was not offered with an attack of its own (R12).

It always ends its turns, also at the dnd3e delay floor (where it acts or forfeits, R9), and
never holds a held turn again, so the combat always moves on. Its choices come from
``random.Random(seed)``: the same seed makes the same choices from the same views (the views
themselves depend on how the other players' commands interleave).

What it types (its actions' descriptions, its triggers' words) is written in English as
templates and worded by its ``words`` (:data:`Words`): the default fills the English in, and a
table in another language passes its translator (``turnkeeper demo --locale pt-BR`` passes
the daemon's catalogues). The templates are extracted with the daemon's messages.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping
from typing import Literal

from turnkeeper_engine import BUNDLED_RULES, RuleBook
from turnkeeper_engine.model import (
    ActionSpec,
    Combatant,
    Predicate,
    Reservation,
    Trigger,
    Turn,
    TurnRef,
    Window,
)

from .aio import AsyncClient, CommandResult
from .bot import Bot
from .errors import CallError
from .views import CombatView, side

__all__ = ["SensibleBot", "Words", "english", "side"]

Words = Callable[[str, Mapping[str, str]], str]
"""How a bot words what it types: ``(template, args)`` to text, the template in English with
``{name}`` pieces (``"{name} moves"``)."""


def english(template: str, args: Mapping[str, str]) -> str:
    """The default :data:`Words`: the English template, filled in."""
    return template.format(**args)


def _resolved(result: CommandResult) -> bool:
    """Whether a declared action went ahead at once, rather than waiting for a window."""
    return any(e.get("event") == "action_resolved" for e in result["events"])


class SensibleBot(Bot):
    """Plays its combatants sensibly with seeded randomness; see the module docstring.

    The chances are class attributes, so a subclass can make a bolder or a more careful bot.
    """

    hold_chance = 0.12
    """Of a normal turn: hold (marvel) or delay (dnd3e) it, then plan the held turn."""
    reserve_chance = 0.2
    """Of a turn not held: reserve (marvel) or ready (dnd3e) an attack."""
    refocus_chance = 0.05
    """Of a dnd3e turn neither held nor spent readying: refocus (R14)."""
    move_chance = 0.5
    """Of a turn that attacked or reserved: also move."""
    pass_chance = 0.15
    """Of a window offered for a reservation: pass rather than claim."""
    join_chance = 0.1
    """marvel: of a window not offered, join it with an attack on its enemy actor."""
    forfeit_chance = 0.25
    """dnd3e: of a turn at the delay floor: forfeit rather than act."""

    def __init__(
        self,
        client: AsyncClient,
        combatants: Collection[str] | None = None,
        *,
        seed: int | None = None,
        words: Words = english,
        rules: RuleBook = BUNDLED_RULES,
    ) -> None:
        super().__init__(client, combatants, rules=rules)
        self.random = random.Random(seed)
        """Every choice this bot makes comes from here."""
        self.words = words
        """What the bot types, in its table's language."""

    def say(self, template: str, **args: str) -> str:
        """``template`` (a string literal, extracted for translation) worded by :attr:`words`."""
        return self.words(template, args)

    # Helpers -------------------------------------------------------------------------------

    def enemies(self, combat: CombatView, combatant: Combatant) -> list[Combatant]:
        """Active combatants on another side, in initiative order."""
        mine = side(combatant)
        return [c for c in combat.order() if c.status == "active" and side(c) != mine]

    def _foe(self, combat: CombatView, me: Combatant, window: Window) -> Combatant | None:
        """The one whose moment opened ``window``, if it is an enemy still in the fight."""
        actor = combat.combatant(window.facts.actor) if window.facts.actor else None
        if actor is None or actor.status != "active" or side(actor) == side(me):
            return None
        return actor

    async def _declare(self, combat: CombatView, turn: TurnRef, action: ActionSpec) -> bool:
        """Declare ``action``; whether it resolved at once (else it waits for a window, and
        the turn comes back to :meth:`on_my_turn` once the window is done)."""
        result = await self.client.declare_action(combat.id, turn=turn, action=action)
        return _resolved(result)

    # Callbacks -----------------------------------------------------------------------------

    async def on_my_turn(self, combat: CombatView, turn: Turn, combatant: Combatant) -> None:
        rules = combat.rules
        ref = turn.ref
        enemies = self.enemies(combat, combatant)
        target = self.random.choice(enemies) if enemies else None
        if rules is None or turn.used or turn.refocus:
            # A ruleset this process does not know, or a turn resuming after its action's
            # window: nothing more to decide.
            await self.client.end_turn(combat.id, turn=ref)
            return
        if turn.kind == "floor":
            # dnd3e, at the delay floor: act now or forfeit the round (R9); never hold again.
            if target is not None and self.random.random() >= self.forfeit_chance:
                attack = ActionSpec(
                    "attack", description=self.say("attacks at last"), targets=(target.id,)
                )
                if not await self._declare(combat, ref, attack):
                    return
            await self.client.end_turn(combat.id, turn=ref)
            return
        others = [c for c in combat.order() if c.id != combatant.id and c.status == "active"]
        roll = self.random.random()
        # Not in the marvel bonus round: with only the Fantastic acting, a hold there lapses
        # at once.
        holds = turn.kind == "normal" and combat.phase == "rounds" and bool(others)
        if holds and roll < self.hold_chance:
            await self._hold(combat, ref, combatant, others)
            return
        # What the turn has spent: counted from this bot's own choices, as it reads no fresh
        # view between its commands.
        spent: list[str] = []
        roll = self.random.random()
        if target is not None and roll < self.reserve_chance:
            await self._reserve(combat, ref, combatant, target)
            spent.append("standard")
        elif rules.refocus and roll < self.reserve_chance + self.refocus_chance:
            if not _resolved(await self.client.refocus(combat.id, turn=ref)):
                return
            spent.append("full")
        elif target is not None:
            attack = self._attack(combat, target)
            if not await self._declare(combat, ref, attack):
                return
            spent.append(rules.action_type(attack.kind) or "standard")
        move = rules.action_type("move")
        moves = (
            move is not None
            and rules.can_spend(tuple(spent), move)
            and self.random.random() < self.move_chance
        )
        if moves and not await self._declare(
            combat, ref, ActionSpec("move", description=self.say("moves"))
        ):
            return
        await self.client.end_turn(combat.id, turn=ref)

    async def on_trigger(
        self,
        combat: CombatView,
        window: Window,
        combatant: Combatant,
        reservation: Reservation | None,
    ) -> None:
        claim = self.random.random() >= self.pass_chance
        if reservation is not None and claim:
            await self.client.claim_reaction(
                combat.id, window=window.id, combatant=combatant.id, reservation=reservation.id
            )
            return
        rules = combat.rules
        actor = self._foe(combat, combatant, window)
        stated = rules is not None and rules.reserve_mode == "reserve" and combatant.reaction
        if reservation is None and claim and stated and actor is not None:
            # marvel: the narrator offered the moment without a reservation; react to it.
            action = ActionSpec("attack", description=self.say("reacts"), targets=(actor.id,))
            await self.client.claim_reaction(
                combat.id, window=window.id, combatant=combatant.id, action=action
            )
            return
        await self.client.pass_reaction(combat.id, window=window.id, combatant=combatant.id)

    async def on_reaction_window(self, combat: CombatView, window: Window) -> None:
        rules = combat.rules
        if rules is None or rules.reserve_mode != "reserve" or window.status != "open":
            return
        if self.random.random() >= self.join_chance:
            return
        answered = {c.combatant for c in window.claims} | set(window.passes)
        for c in combat.order():
            actor = self._foe(combat, c, window)
            if self.plays(c) and c.reaction and c.id not in answered and actor is not None:
                action = ActionSpec("attack", description=self.say("jumps in"), targets=(actor.id,))
                await self.client.claim_reaction(
                    combat.id, window=window.id, combatant=c.id, action=action
                )
                return

    # Choices -------------------------------------------------------------------------------

    def _attack(self, combat: CombatView, target: Combatant) -> ActionSpec:
        # Now and then something else than a blow: a dnd3e spell (which readied actions may be
        # waiting for) or a marvel power.
        if self.random.random() < 0.2:
            if combat.ruleset == "dnd3e":
                return ActionSpec(
                    "cast", description=self.say("casts a spell"), targets=(target.id,)
                )
            if combat.ruleset == "marvel":
                return ActionSpec(
                    "power", description=self.say("uses a power"), targets=(target.id,)
                )
        return ActionSpec("attack", description=self.say("attacks"), targets=(target.id,))

    async def _hold(
        self, combat: CombatView, ref: TurnRef, me: Combatant, others: list[Combatant]
    ) -> None:
        # The plan goes with the hold (R9): said later, the moment may have passed. Someone
        # still to act this round; else (marvel, where a hold lasts) next round's first ones,
        # who come before this combatant's own place; else (a dnd3e delay) no plan: the floor.
        ids = [c.id for c in combat.order()]
        later = [c for c in others if ids.index(c.id) > ids.index(me.id)]
        rules = combat.rules
        carries = rules is not None and rules.holds_carry_over
        if not later and not carries:
            await self.client.hold(combat.id, turn=ref)
            return
        when: Literal["before", "after"] = "before" if self.random.random() < 0.5 else "after"
        other = self.random.choice(later or others)
        try:
            await self.client.hold(combat.id, turn=ref, when=when, other=other.id)
        except CallError as e:
            if e.code != "moment_passed":
                raise
            # The order moved under this bot's view (a readied action, a late arrival): hold
            # with nothing said; the refused command changed nothing.
            await self.client.hold(combat.id, turn=ref)

    async def _reserve(
        self, combat: CombatView, ref: TurnRef, me: Combatant, target: Combatant
    ) -> None:
        variant = self.random.randrange(3)
        if variant == 0:
            kinds = ("attack", "cast") if combat.ruleset == "dnd3e" else ("attack",)
            if len(kinds) > 1:
                text = self.say("{name} attacks or casts", name=target.name)
            else:
                text = self.say("{name} attacks", name=target.name)
            predicate = Predicate(events=("action_declared",), actors=(target.id,), kinds=kinds)
        elif variant == 1:
            text = self.say("{name} moves", name=target.name)
            predicate = Predicate(events=("move",), actors=(target.id,))
        else:
            text = self.say("anyone attacks {name}", name=me.name)
            predicate = Predicate(kinds=("attack",), targets=(me.id,))
        action = ActionSpec("attack", description=self.say("strike"), targets=(target.id,))
        await self.client.reserve(
            combat.id,
            turn=ref,
            reserved_type="standard",
            action=action,
            trigger=Trigger(text, predicate),
        )
