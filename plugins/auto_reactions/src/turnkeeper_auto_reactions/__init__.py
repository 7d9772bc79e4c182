"""Automatic reactions (R10–R12): claims reactions for the combatants that handed theirs over.

A combatant tagged ``auto`` (a bot, or a player who chose automatic reactions) or a reserved
action tagged ``auto`` is delegated (``turnkeeper_sdk.hookspecs.DELEGATED_TAG``). When a reaction
window opens (``on_trigger``), this plugin answers for them:

- **Reservations.** A delegated reservation whose trigger fits the moment is claimed
  (``claim_reaction`` with its id): in ``marvel`` it spends the reaction and interrupts (R10);
  in ``dnd3e`` the readied action goes before the triggering one (R11). A reservation fits when
  its predicate matches the window's facts, as the engine matches it; one with only words for a
  trigger fits when the narrator's announcement offered its combatant.
- **Standing reactions.** A combatant tagged ``auto`` may also carry tags
  ``react:<action kind>:<trigger kind>:<whom>``: when an opponent (another ``side:``) declares an
  action of ``<trigger kind>`` (or ``any``) aimed at ``<whom>``, it reacts with an action of
  ``<action kind>`` aimed at that opponent, if it still has its reaction. ``<whom>`` is ``self``,
  ``ally`` (another combatant of its side), ``any`` (whoever, or no one), or a combatant's id.
  ``react:interpose:attack:ally`` reads "interpose when an ally is attacked". Without a ``side:``
  tag, player characters are side ``players`` and the rest side ``narrator``.
- **Passing.** A combatant tagged ``auto`` that is offered a window with nothing above to claim
  passes, so the window never waits for a bot. A combatant that delegated only a reservation is
  left to its controller for everything else.
- **Unseen actors.** Nobody reacts to what its controller cannot see (R16): a hidden
  combatant's action is seen only by the narrator's combatants and by those of the hidden
  combatant's own player. Its player could not even see the window to finish the reaction.

Standing reactions are claims without a reservation, which only rulesets that reserve rather
than ready allow (``marvel``; a dnd3e reaction is a readied action, R11). The engine opens a
window for a declared action only when a reservation matches it or the combat waits for answers
(``window_deadline`` above 0). So:

- when the declaration's own window is open, standing reactions are claimed in it and resolve
  before the action, like reservations;
- when it opened none, the action has already resolved; this plugin then announces a moment of
  its own (``announce_trigger``, event ``standing_reaction``, the action's actor, kind, targets,
  tags and zone) offering the standing reactors, and claims for them there. The reactions come
  right after the action rather than before it: a table that wants an interposing bodyguard to
  step in before the blow lands sets ``window_deadline`` above 0.

The reaction is declared for the table to resolve: finishing it (``finish_reaction``) is the
controller's or the narrator's, as for any claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnkeeper_engine import Ruleset
from turnkeeper_engine.commands import AnnounceTrigger, ClaimReaction, Command, PassReaction
from turnkeeper_engine.model import (
    ActionSpec,
    Combatant,
    Reservation,
    TriggerFacts,
    Window,
    perceives,
)
from turnkeeper_sdk.hookspecs import DELEGATED_TAG, hookimpl
from turnkeeper_sdk.views import CombatView, side

__version__ = "0.1.0"

STANDING_EVENT = "standing_reaction"
"""The event of the moment this plugin announces for standing reactions to an action that
opened no window of its own."""

REACT_PREFIX = "react:"
STANDING_TAG = "standing"
"""Tags the action of a standing-reaction claim carries, besides ``auto``."""


@dataclass(frozen=True, slots=True)
class Standing:
    """A standing reaction: react with ``kind`` when an opponent's ``trigger`` aims at ``whom``."""

    tag: str
    kind: str
    trigger: str
    whom: str

    @classmethod
    def parse(cls, tag: str) -> Standing | None:
        parts = tag.removeprefix(REACT_PREFIX).split(":")
        if not tag.startswith(REACT_PREFIX) or len(parts) != 3 or not all(parts):
            return None
        return cls(tag, *parts)

    def fits(self, combat: CombatView, reactor: Combatant, facts: TriggerFacts) -> bool:
        """Whether the moment ``facts`` calls for this reaction from ``reactor``."""
        actor = combat.combatant(facts.actor) if facts.actor is not None else None
        if actor is None or actor.id == reactor.id or side(actor) == side(reactor):
            return False
        if not perceives(reactor, actor):  # R16: it cannot react to what it cannot see
            return False
        if facts.kind is None or self.trigger not in ("any", facts.kind):
            return False
        if self.whom == "any":
            return True
        if self.whom == "self":
            return reactor.id in facts.targets
        if self.whom == "ally":
            targets = (combat.combatant(t) for t in facts.targets if t != reactor.id)
            return any(t is not None and side(t) == side(reactor) for t in targets)
        return self.whom in facts.targets


def standing(combatant: Combatant) -> list[Standing]:
    """The standing reactions a combatant declared through its tags, in tag order."""
    found = (Standing.parse(t) for t in combatant.tags if t.startswith(REACT_PREFIX))
    return [s for s in found if s is not None]


def _fits(reservation: Reservation, facts: TriggerFacts) -> bool:
    """The engine offers a window to a combatant, not to a reservation, and a combatant may hold
    more than one (a standard and a movement action reserved): which one fits is decided here,
    by the engine's own rule."""
    predicate = reservation.trigger.predicate
    if predicate is None:
        # Only words for a trigger: the narrator judged it fired by offering the combatant (the
        # actor too: the Mandarin's own "the time for talk is over"); the moments this plugin
        # announces offer only standing reactors.
        return facts.event != STANDING_EVENT
    # As in the engine, a combatant's own action never fires its predicate.
    return reservation.combatant != facts.actor and predicate.matches(facts)


def _can_stand(rules: Ruleset | None, combatant: Combatant) -> bool:
    """Whether a combatant may react with a standing reaction now."""
    return (
        rules is not None
        and rules.reserve_mode == "reserve"
        and combatant.status == "active"
        and DELEGATED_TAG in combatant.tags
        and (combatant.reaction or not rules.claim_costs_reaction)
    )


def _standing_for(
    combat: CombatView, rules: Ruleset | None, combatant: Combatant, facts: TriggerFacts
) -> Standing | None:
    if not _can_stand(rules, combatant):
        return None
    return next((s for s in standing(combatant) if s.fits(combat, combatant, facts)), None)


def _standing_claim(
    combat: CombatView, window: Window, combatant: Combatant
) -> ClaimReaction | None:
    """The claim of a standing reaction the window's moment calls for, if any."""
    rules = combat.rules
    facts = window.facts
    reaction = _standing_for(combat, rules, combatant, facts)
    if rules is None or reaction is None:
        return None
    # The engine wants a type for every action: a kind outside the ruleset's catalogue (say
    # `interpose` in marvel) is stated as the ruleset's first action type. The claim spends
    # the reaction either way, never that action.
    known = rules.action_type(reaction.kind)
    # No description: a table reads the action by its kind, in its own language; a text
    # written here would be English (and a tag) for every reader.
    action = ActionSpec(
        reaction.kind,
        None if known is not None else rules.action_types[0],
        "",
        (facts.actor,) if facts.actor is not None else (),
        (DELEGATED_TAG, STANDING_TAG),
    )
    return ClaimReaction(window.id, combatant.id, action=action)


class AutoReactionsPlugin:
    """Answers reaction windows for delegated combatants and reservations."""

    @hookimpl
    def on_action_declared(
        self, combat: CombatView, combatant: Combatant, action: ActionSpec
    ) -> AnnounceTrigger | None:
        """An action that opened no window gets one for the standing reactions it calls for."""
        if combat.window is not None:
            return None  # its own window is open: on_trigger claims there
        facts = TriggerFacts(
            STANDING_EVENT,
            combatant.id,
            action.kind,
            action.targets,
            action.tags,
            action.zone,
            f"standing reactions to {combatant.name}'s {action.kind}",
        )
        rules = combat.rules
        reactors = tuple(
            c.id for c in combat.order() if _standing_for(combat, rules, c, facts) is not None
        )
        return AnnounceTrigger(facts, offer=reactors) if reactors else None

    @hookimpl
    def on_trigger(
        self, combat: CombatView, window: Window, offered: Sequence[Reservation]
    ) -> list[Command]:
        """Claim delegated reservations and standing reactions; pass for idle bots."""
        answered = {cl.combatant for cl in window.claims} | set(window.passes)
        proposed: list[Command] = []
        # Those the window was not offered to first: the last offered answer closes it.
        for c in combat.order():
            if c.id not in answered and c.id not in window.offered:
                standing_claim = _standing_claim(combat, window, c)
                if standing_claim is not None:
                    proposed.append(standing_claim)
        actor_id = window.facts.actor
        actor = combat.combatant(actor_id) if actor_id is not None else None
        for combatant_id in window.offered:
            who = combat.combatant(combatant_id)
            if who is None or who.id in answered:
                continue
            auto = DELEGATED_TAG in who.tags
            reservation = next(
                (
                    r
                    for r in offered
                    if r.combatant == who.id
                    and (auto or DELEGATED_TAG in r.action.tags)
                    and perceives(who, actor)
                    and _fits(r, window.facts)
                ),
                None,
            )
            if reservation is not None:
                proposed.append(ClaimReaction(window.id, who.id, reservation=reservation.id))
            elif (standing_claim := _standing_claim(combat, window, who)) is not None:
                proposed.append(standing_claim)
            elif auto:
                proposed.append(PassReaction(window.id, who.id))
        return proposed


plugin = AutoReactionsPlugin()
"""The instance the ``auto-reactions`` entry point names."""
