"""Surprise for the ``marvel`` ruleset (R8), decided from what the bridge says about the
combatants, with every die recorded (R2).

At the start of a combat, a side whose every active member is sneaking ambushes everyone else:
each other combatant (a group once, through its first member) makes a Vigilance check against
the side's stealth. A failed check marks it Surprised (``mark_surprised``: one trouble on its
initiative check and no bonus-round turn; the engine applies both). Later, when an unseen
combatant is about to declare an ``attack``, each target checks again; a failure surprises it
(``surprise``: the attacker has an edge on attacks against it for one round).

Every check is a d616 (R3): the watcher's dice plus its Vigilance against 10 plus the sneaker's
stealth, the way the Marvel Multiverse RPG makes a defense score of an ability. It succeeds when
the total meets or beats that number. Each is recorded as an ``outcome_recorded`` event of kind
``surprise_check`` with its dice, rerolls and numbers.

Tags (free-form combatant tags set by the narrator or the bridge):

- ``side:<name>``: who fights together. Without it, player characters are side ``players`` and
  everyone else side ``narrator``.
- ``stealth:<N>``: sneaking; a check to notice it needs 10 + N.
- ``hidden``: sneaking with stealth 0 unless ``stealth:<N>`` says more; the combatant's own
  ``hidden`` flag (narrator-only, R16) counts the same.
- ``invisible``: sneaking, and one trouble on every check to notice it.
- ``vigilance:<N>``: added to this combatant's checks to notice sneakers.
- ``unaware``: Surprised at the start without a check (asleep, distracted: the narrator's call).

Each outcome's text is a template with the names and numbers as arguments
(``turnkeeper_sdk.outcome``), so a table hears it in its own language.

Anything a check says about a hidden combatant is recorded about that combatant, so players and
observers see it only once it is revealed.

The plugin is the module-level :data:`plugin`; its ``dice`` are the system's cryptographic
generator unless a test or demo gives it seeded ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnkeeper_engine import DiceSource, SystemDice
from turnkeeper_engine.commands import Command, MarkSurprised, Surprise
from turnkeeper_engine.dice import d616_display, roll_d616
from turnkeeper_engine.model import ActionSpec, Check, Combatant, OptionValue
from turnkeeper_sdk.hookspecs import hookimpl
from turnkeeper_sdk.views import CombatView, outcome, recorded_about, side, tag_number

__version__ = "0.1.0"

RULESET = "marvel"
"""Only the Marvel Multiverse ruleset has surprise (R8)."""

STEALTH_BASE = 10
"""A check to notice a sneaker needs 10 + its stealth, as a Marvel defense score is 10 plus the
ability it defends with."""

CHECK_KIND = "surprise_check"
UNAWARE_KIND = "surprise"
"""The kinds of the outcomes this plugin records."""


def unseen(combatant: Combatant) -> bool:
    """Whether others cannot see it: hidden (flag or tag) or invisible."""
    return combatant.hidden or "hidden" in combatant.tags or "invisible" in combatant.tags


def sneaking(combatant: Combatant) -> bool:
    """Whether it is trying not to be noticed: unseen, or with a stealth of its own."""
    return unseen(combatant) or tag_number("stealth", combatant.tags) is not None


def stealth(combatant: Combatant) -> int:
    return tag_number("stealth", combatant.tags) or 0


@dataclass(frozen=True, slots=True)
class Detection:
    """One check to notice sneakers: the watcher's d616 plus Vigilance against a number."""

    watcher: Combatant
    check: Check
    target_number: int

    @property
    def noticed(self) -> bool:
        return self.check.total >= self.target_number

    def sum(self) -> str:
        """The check as a table reads it: ``"2, 3, M + 2 = 13"``."""
        modifier = self.check.modifier
        sign = "+" if modifier >= 0 else "-"
        return f"{d616_display(self.check)} {sign} {abs(modifier)} = {self.check.total}"

    def values(self, by: str) -> tuple[tuple[str, OptionValue], ...]:
        """Every die and number of the check, for the outcome (R2)."""
        check = self.check
        rerolls = "; ".join(
            f"{r.reason} die {r.die + 1}: {r.old} -> {r.new}, kept {r.kept}" for r in check.rerolls
        )
        return (
            ("watcher", self.watcher.id),
            ("by", by),
            ("dice", check.dice),
            ("rolled", ",".join(map(str, check.rolled))),
            ("rerolls", rerolls),
            ("faces", ",".join(map(str, check.faces))),
            ("vigilance", check.modifier),
            ("total", check.total),
            ("fantastic", check.fantastic),
            ("troubles", check.troubles),
            ("target_number", self.target_number),
            ("noticed", self.noticed),
        )


class SurprisePlugin:
    """Decides surprise at the start and for unseen attackers, rolling on :attr:`dice`."""

    def __init__(self, dice: DiceSource | None = None) -> None:
        self.dice: DiceSource = dice or SystemDice()

    def _detect(self, watcher: Combatant, sneakers: Sequence[Combatant]) -> Detection:
        # A band of sneakers is as easy to notice as the clumsiest of them; it is harder to see
        # only if every one of them is invisible.
        number = STEALTH_BASE + min(stealth(s) for s in sneakers)
        troubles = int(all("invisible" in s.tags for s in sneakers))
        vigilance = tag_number("vigilance", watcher.tags) or 0
        check = roll_d616(self.dice, vigilance, troubles=troubles)
        return Detection(watcher, check, number)

    @hookimpl
    def before_combat_start(self, combat: CombatView) -> list[Command]:
        """Who is Surprised when the combat starts (R8)."""
        if combat.ruleset != RULESET:
            return []
        sides: dict[str, list[Combatant]] = {}
        for c in combat.active():
            sides.setdefault(side(c), []).append(c)
        ambushes = {name: ms for name, ms in sides.items() if all(sneaking(m) for m in ms)}
        proposed: list[Command] = []
        for unit in _units(combat):
            # Surprise comes before the initiative check; the narrator may have decided already.
            if any(m.check is not None for m in unit) or all(m.surprised for m in unit):
                continue
            leader = unit[0]
            surprised = False
            if any("unaware" in m.tags for m in unit):
                surprised = True
                proposed.append(
                    outcome(
                        UNAWARE_KIND,
                        "{name} is unaware: Surprised without a check.",
                        leader.id,
                        name=leader.name,
                    )
                )
            else:
                for name, sneakers in ambushes.items():
                    if name == side(leader):
                        continue
                    found = self._detect(leader, sneakers)
                    surprised = surprised or not found.noticed
                    about = recorded_about(*sneakers, leader)
                    values = found.values(f"side:{name}")
                    figures: dict[str, OptionValue] = {
                        "name": leader.name,
                        "side": name,
                        "check": found.sum(),
                        "number": found.target_number,
                    }
                    if found.noticed:
                        # TRANSLATORS: {check} is a d616 check as a sum, e.g. "2, 3, M + 2 = 13".
                        told = outcome(
                            CHECK_KIND,
                            "{name}'s Vigilance check against the ambush of side {side}: "
                            "{check} against {number}: notices them.",
                            about,
                            values,
                            **figures,
                        )
                    else:
                        told = outcome(
                            CHECK_KIND,
                            "{name}'s Vigilance check against the ambush of side {side}: "
                            "{check} against {number}: fails: Surprised.",
                            about,
                            values,
                            **figures,
                        )
                    proposed.append(told)
            if surprised:
                proposed.extend(MarkSurprised(m.id) for m in unit if not m.surprised)
        return proposed

    @hookimpl
    def before_action_declared(
        self, combat: CombatView, combatant: Combatant, action: ActionSpec
    ) -> list[Command]:
        """An unseen attacker's targets check to notice it; those who fail are Surprised (R8).

        Decided just before the attack is declared, so the engine counts the surpriser's edge
        (``action_declared.edges``) on this very attack, as on its attacks against the target
        until the condition ends.
        """
        if combat.ruleset != RULESET or action.kind != "attack" or not unseen(combatant):
            return []
        proposed: list[Command] = []
        for target_id in dict.fromkeys(action.targets):
            target = combat.combatant(target_id)
            if target is None or target.status != "active" or target.id == combatant.id:
                continue
            if any(
                k.type == "surprised" and combatant.id in k.surprisers
                for k in combat.conditions_on(target.id)
            ):
                continue  # already Surprised by this attacker: its edge stands
            found = self._detect(target, (combatant,))
            about = recorded_about(combatant, target)
            values = (*found.values(combatant.id), ("edge", not found.noticed))
            figures: dict[str, OptionValue] = {
                "name": target.name,
                "attacker": combatant.name,
                "check": found.sum(),
                "number": found.target_number,
            }
            if found.noticed:
                proposed.append(
                    outcome(
                        CHECK_KIND,
                        "{name}'s Vigilance check to notice {attacker}: {check} against "
                        "{number}: notices the attack coming.",
                        about,
                        values,
                        **figures,
                    )
                )
                continue
            proposed.append(
                outcome(
                    CHECK_KIND,
                    "{name}'s Vigilance check to notice {attacker}: {check} against {number}: "
                    "fails: Surprised; {attacker} has an edge on this attack and on attacks "
                    "against {name} until {attacker}'s next turn starts.",
                    about,
                    values,
                    **figures,
                )
            )
            proposed.append(Surprise(target.id, (combatant.id,)))
        return proposed


def _units(combat: CombatView) -> list[list[Combatant]]:
    """The active combatants as they check: alone, or a group at once (as for initiative,
    R4), in the order they were added."""
    units: list[list[Combatant]] = []
    groups: dict[str, list[Combatant]] = {}
    for c in combat.active():
        if c.group is None:
            units.append([c])
        elif c.group in groups:
            groups[c.group].append(c)
        else:
            groups[c.group] = [c]
            units.append(groups[c.group])
    return units


plugin = SurprisePlugin()
"""The instance the ``surprise`` entry point names."""
