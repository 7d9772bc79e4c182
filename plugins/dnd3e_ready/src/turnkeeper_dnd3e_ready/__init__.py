"""The D&D 3e SRD's readied specials (R11), computed and recorded as ``outcome_recorded`` events.

The engine orders readied actions (they go before the action that triggered them, R11); this
plugin works out what three of them do, with every die recorded (R2):

- **Distracting a spellcaster** (kind ``distraction``): a readied ``attack`` on the caster,
  triggered by a ``cast``. If it hits, the caster makes a Concentration check, DC 10 + damage
  dealt + spell level, or loses the spell.
- **Readying to counterspell** (kinds ``counterspell_identify``, ``counterspell``): a readied
  ``cast`` tagged ``counterspell``, triggered by a ``cast``. When the caster starts the spell the
  readier makes a Spellcraft check, DC 15 + spell level, to identify it; this is recorded as the
  window opens, so its controller knows before claiming. Claimed, an identified spell is ruined
  by the same spell, or by dispel magic if its dispel check (d20 + caster level, at most +10)
  reaches 11 + the caster's level.
- **Setting a weapon against a charge** (kind ``set_against_charge``): a readied ``attack``
  tagged ``set``, triggered by a ``charge``, deals double damage if it hits (a rolled damage is
  rolled twice and added, as 3e multiplies damage).

The readied actions' outcomes are recorded when the window closes with their claims, in
initiative order, before the triggering action resolves. Whether an attack hits is the table's
to say: the outcomes read "if it hits".

The figures come from tags, each looked up on the action first, then on its combatant:

- the triggering ``cast``: ``spell:<name>``, ``spell_level:<N>``, the caster's
  ``concentration:<N>`` (its Concentration bonus) and ``caster_level:<N>``;
- the readied ``attack``: ``damage:<N>`` (damage dealt) or ``damage:<X>d<Y>[+Z]`` (rolled by the
  plugin), ``set`` for a weapon set against a charge;
- the readied ``cast``: ``counterspell``, the readier's ``spellcraft:<N>`` and
  ``caster_level:<N>``, and one ``prepared:<spell>`` per spell it can cast now
  (``prepared:dispel_magic`` for dispel magic). Spell names compare without case, with spaces
  and hyphens read as ``_``.

A special whose figures are missing is recorded with the tags it needs, and nothing is rolled.

Each outcome's text is a template with its figures as arguments (``turnkeeper_sdk.outcome``), so
a table hears it in its own language.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from turnkeeper_engine import DiceSource, SystemDice
from turnkeeper_engine.commands import Command, RecordOutcome
from turnkeeper_engine.model import ActionSpec, Combatant, OptionValue, TriggerFacts, Window
from turnkeeper_sdk.hookspecs import hookimpl
from turnkeeper_sdk.views import MAX_TAG_NUMBER, CombatView, outcome, recorded_about, tag_number

__version__ = "0.1.0"

RULESET = "dnd3e"

CONCENTRATION_DC_BASE = 10
"""SRD: a damaged caster's Concentration DC is 10 + damage dealt + spell level."""
SPELLCRAFT_DC_BASE = 15
"""SRD: identifying a spell being cast is a Spellcraft check, DC 15 + spell level."""
DISPEL_DC_BASE = 11
"""SRD dispel magic: a dispel check against DC 11 + the spell's caster level."""
DISPEL_LEVEL_CAP = 10
"""SRD dispel magic: the dispel check adds the caster level, at most +10."""
SET_MULTIPLIER = 2
"""SRD: a weapon set against a charge deals double damage."""
DISPEL_MAGIC = "dispel_magic"
"""Dispel magic as ``prepared:`` tags name it."""

MAX_DAMAGE_DICE = 20
"""Most dice one ``damage:`` tag may roll: twice any 3e weapon's, and a bound on what one tag
makes the plugin roll and record."""
MAX_DAMAGE_SIDES = 100
"""The largest die 3e rolls, a d100."""
MAX_REMEMBERED = 1024
"""Open windows whose Spellcraft checks are remembered until they close. A window outliving
1024 newer ones is long gone; if its checks were forgotten (or the daemon restarted) they are
rolled again when it closes."""

_DICE = re.compile(r"(\d+)d(\d+)([+-]\d+)?")


def _value(name: str, *tag_lists: Iterable[str]) -> str | None:
    """The value of the first ``name:<value>`` tag, looking in each list in turn."""
    prefix = f"{name}:"
    for tags in tag_lists:
        for tag in tags:
            if tag.startswith(prefix) and tag != prefix:
                return tag.removeprefix(prefix)
    return None


def spell_name(name: str) -> str:
    """A spell's name as tags compare it: ``Dispel Magic`` is ``dispel_magic``."""
    return re.sub(r"[\s-]+", "_", name.strip().lower())


def _tags(combatant: Combatant | None) -> tuple[str, ...]:
    return () if combatant is None else combatant.tags


def _plus(roll: int, bonus: int) -> str:
    """A roll and its bonus as a table says them: ``12 + 5``, ``12 - 1``."""
    return f"{roll} + {bonus}" if bonus >= 0 else f"{roll} - {-bonus}"


@dataclass(frozen=True, slots=True)
class Damage:
    """A ``damage:`` tag: a number dealt, or dice to roll plus a modifier."""

    count: int
    sides: int
    modifier: int

    @classmethod
    def parse(cls, text: str) -> Damage | None:
        text = text.replace(" ", "")
        if text.isdigit():
            return cls(0, 0, int(text)) if int(text) <= MAX_TAG_NUMBER else None
        found = _DICE.fullmatch(text)
        if found is None:
            return None
        count, sides, modifier = int(found[1]), int(found[2]), int(found[3] or 0)
        if not (
            1 <= count <= MAX_DAMAGE_DICE
            and 2 <= sides <= MAX_DAMAGE_SIDES
            and abs(modifier) <= MAX_TAG_NUMBER
        ):
            return None
        return cls(count, sides, modifier)

    def __str__(self) -> str:
        if not self.count:
            return str(self.modifier)
        modifier = f"{self.modifier:+d}" if self.modifier else ""
        return f"{self.count}d{self.sides}{modifier}"

    def roll(self, dice: DiceSource) -> tuple[int, tuple[int, ...]]:
        """The damage and the faces rolled for it; a hit deals at least 1 (SRD)."""
        faces = tuple(dice.roll(self.sides) for _ in range(self.count))
        total = sum(faces) + self.modifier
        return (max(total, 1) if self.count else total), faces


@dataclass(frozen=True, slots=True)
class Identified:
    """A readier's Spellcraft check against the spell being cast."""

    roll: int
    bonus: int
    dc: int
    spell: str | None

    @property
    def total(self) -> int:
        return self.roll + self.bonus

    @property
    def identified(self) -> bool:
        return self.total >= self.dc


Values = tuple[tuple[str, OptionValue], ...]


def _missing(needs: Sequence[str]) -> tuple[Values, str]:
    """The values of a special whose figures are missing, and the tags it needs as a table
    types them (``spell_level:N, spellcraft:N``)."""
    tags = ", ".join(f"{n}:N" if n != "spell" else "spell:<name>" for n in needs)
    return (("missing", ",".join(needs)),), tags


_WindowKey = tuple[str, str, float, TriggerFacts]


class Dnd3eReadyPlugin:
    """Computes the readied specials of R11, rolling on :attr:`dice`."""

    def __init__(self, dice: DiceSource | None = None) -> None:
        self.dice: DiceSource = dice or SystemDice()
        self._identified: dict[_WindowKey, dict[str, Identified | None]] = {}

    # -------------------------------------------------------------------------------- hooks

    @hookimpl
    def on_window_open(self, combat: CombatView, window: Window) -> list[Command]:
        """A spell is starting: each offered readied counterspell tries to identify it."""
        if combat.ruleset != RULESET or window.facts.kind != "cast":
            return []
        proposed: list[Command] = []
        checks = self._remember(_key(combat, window))
        for combatant_id in window.offered:
            for r in combat.reservations_of(combatant_id):
                if _counterspell(r.action) and r.combatant not in checks:
                    checks[r.combatant] = self._identify(
                        combat, window, r.combatant, r.action, proposed
                    )
        return proposed

    @hookimpl
    def on_window_close(self, combat: CombatView, window: Window) -> list[Command]:
        """The readied actions claimed in the window are about to resolve: their specials."""
        checks = self._identified.pop(_key(combat, window), {})
        if combat.ruleset != RULESET:
            return []
        facts = window.facts
        caster = combat.combatant(facts.actor) if facts.actor is not None else None
        place = {c: n for n, c in enumerate(combat.state.order)}
        proposed: list[Command] = []
        # R11: several readied actions on one trigger resolve in current initiative order.
        for claim in sorted(window.claims, key=lambda cl: place.get(cl.combatant, len(place))):
            readier = combat.combatant(claim.combatant)
            action = claim.action
            if readier is None or claim.reservation is None:
                continue
            if facts.kind == "cast" and _counterspell(action):
                if readier.id in checks:
                    identified = checks[readier.id]
                else:
                    identified = self._identify(combat, window, readier.id, action, proposed)
                if identified is not None:
                    proposed.append(self._counter(readier, caster, facts, action, identified))
            elif facts.kind == "cast" and action.kind == "attack" and caster is not None:
                if not action.targets or caster.id in action.targets:
                    proposed.append(self._distract(readier, caster, facts, action))
            elif facts.kind == "charge" and action.kind == "attack" and "set" in action.tags:
                proposed.append(self._set(readier, caster, action))
        return proposed

    # ------------------------------------------------------------------------------ specials

    def _remember(self, key: _WindowKey) -> dict[str, Identified | None]:
        """The Spellcraft checks of an open window, kept until it closes (bounded)."""
        if key not in self._identified and len(self._identified) >= MAX_REMEMBERED:
            del self._identified[next(iter(self._identified))]
        return self._identified.setdefault(key, {})

    def _identify(
        self,
        combat: CombatView,
        window: Window,
        readier_id: str,
        action: ActionSpec,
        proposed: list[Command],
    ) -> Identified | None:
        """Roll the readier's Spellcraft check to identify the spell, and record it."""
        readier = combat.combatant(readier_id)
        facts = window.facts
        caster = combat.combatant(facts.actor) if facts.actor is not None else None
        level = tag_number("spell_level", facts.tags, _tags(caster))
        bonus = tag_number("spellcraft", action.tags, _tags(readier))
        name = readier.name if readier is not None else readier_id
        about = recorded_about(readier, caster)
        kind = "counterspell_identify"
        if level is None or bonus is None:
            needs = [n for n, v in (("spell_level", level), ("spellcraft", bonus)) if v is None]
            missing, tags = _missing(needs)
            proposed.append(
                outcome(
                    kind,
                    "{name}'s Spellcraft check: not computed, it needs the tags {tags}.",
                    about,
                    missing,
                    name=name,
                    tags=tags,
                )
            )
            return None
        spell = _value("spell", facts.tags, _tags(caster))
        identified = Identified(
            self.dice.roll(20), bonus, SPELLCRAFT_DC_BASE + level, spell and spell_name(spell)
        )
        values: Values = (
            ("readier", readier_id),
            ("spell", identified.spell),
            ("spell_level", level),
            ("dc", identified.dc),
            ("d20", identified.roll),
            ("spellcraft", bonus),
            ("total", identified.total),
            ("identified", identified.identified),
        )
        figures: dict[str, OptionValue] = {
            "name": name,
            "check": _plus(identified.roll, bonus),
            "total": identified.total,
            "base": SPELLCRAFT_DC_BASE,
            "level": level,
            "dc": identified.dc,
        }
        if not identified.identified:
            # TRANSLATORS: {check} is a d20 roll and a bonus as a sum, e.g. "13 + 6".
            told = outcome(
                kind,
                "{name}'s Spellcraft check to identify the spell: {check} = {total} against DC "
                "{base} + {level} = {dc}: cannot tell the spell.",
                about,
                values,
                **figures,
            )
        elif identified.spell is None:
            told = outcome(
                kind,
                "{name}'s Spellcraft check to identify the spell: {check} = {total} against DC "
                "{base} + {level} = {dc}: identifies the spell.",
                about,
                values,
                **figures,
            )
        else:
            told = outcome(
                kind,
                "{name}'s Spellcraft check to identify the spell: {check} = {total} against DC "
                "{base} + {level} = {dc}: identifies {spell}.",
                about,
                values,
                spell=identified.spell,
                **figures,
            )
        proposed.append(told)
        return identified

    def _counter(
        self,
        readier: Combatant,
        caster: Combatant | None,
        facts: TriggerFacts,
        action: ActionSpec,
        identified: Identified,
    ) -> RecordOutcome:
        """A claimed counterspell: the same spell ruins it; dispel magic needs its check."""
        kind = "counterspell"
        about = recorded_about(readier, caster)
        spell = identified.spell
        # Who and what the sentences name: the spell's caster and the spell, when known.
        named: dict[str, OptionValue] = {"name": readier.name}
        if caster is not None:
            named["caster"] = caster.name
        if spell is not None:
            named["spell"] = spell
        if not identified.identified:
            return outcome(
                kind,
                "{name} did not identify the spell: no counterspell.",
                about,
                (("readier", readier.id), ("countered", False)),
                name=readier.name,
            )
        prepared = {
            spell_name(t.removeprefix("prepared:"))
            for t in (*action.tags, *readier.tags)
            if t.startswith("prepared:")
        }
        if spell is not None and spell in prepared:
            values: Values = (("readier", readier.id), ("with", spell), ("countered", True))
            if caster is None:
                return outcome(
                    kind,
                    "{name} casts {spell} as a counterspell: {spell} is ruined.",
                    about,
                    values,
                    **named,
                )
            return outcome(
                kind,
                "{name} casts {spell} as a counterspell: {caster}'s {spell} is ruined.",
                about,
                values,
                **named,
            )
        if DISPEL_MAGIC not in prepared:
            values = (("readier", readier.id), ("countered", False))
            if spell is None:
                return outcome(
                    kind,
                    "{name} has neither the spell nor dispel magic prepared: no counterspell.",
                    about,
                    values,
                    **named,
                )
            return outcome(
                kind,
                "{name} has neither {spell} nor dispel magic prepared: no counterspell.",
                about,
                values,
                **named,
            )
        level = tag_number("caster_level", action.tags, readier.tags)
        target_level = tag_number("caster_level", facts.tags, _tags(caster))
        if level is None or target_level is None:
            needs = [
                n for n, v in (("caster_level", level), ("caster_level", target_level)) if v is None
            ]
            return self._dispel_missing(kind, about, list(dict.fromkeys(needs)), named)
        roll = self.dice.roll(20)
        bonus = min(level, DISPEL_LEVEL_CAP)
        dc = DISPEL_DC_BASE + target_level
        countered = roll + bonus >= dc
        values = (
            ("readier", readier.id),
            ("with", DISPEL_MAGIC),
            ("dc", dc),
            ("d20", roll),
            ("caster_level", bonus),
            ("total", roll + bonus),
            ("countered", countered),
        )
        figures: dict[str, OptionValue] = {
            **named,
            "check": _plus(roll, bonus),
            "total": roll + bonus,
            "base": DISPEL_DC_BASE,
            "level": target_level,
            "dc": dc,
        }
        # One sentence for each way the spell is named (whose, which) and each result.
        if "caster" in named and "spell" in named:
            if countered:
                return outcome(
                    kind,
                    "{name} counterspells with dispel magic: dispel check {check} = {total} "
                    "against DC {base} + {level} = {dc}: {caster}'s {spell} is ruined.",
                    about,
                    values,
                    **figures,
                )
            return outcome(
                kind,
                "{name} counterspells with dispel magic: dispel check {check} = {total} "
                "against DC {base} + {level} = {dc}: {caster}'s {spell} goes on.",
                about,
                values,
                **figures,
            )
        if "caster" in named:
            if countered:
                return outcome(
                    kind,
                    "{name} counterspells with dispel magic: dispel check {check} = {total} "
                    "against DC {base} + {level} = {dc}: {caster}'s spell is ruined.",
                    about,
                    values,
                    **figures,
                )
            return outcome(
                kind,
                "{name} counterspells with dispel magic: dispel check {check} = {total} "
                "against DC {base} + {level} = {dc}: {caster}'s spell goes on.",
                about,
                values,
                **figures,
            )
        if "spell" in named:
            if countered:
                return outcome(
                    kind,
                    "{name} counterspells with dispel magic: dispel check {check} = {total} "
                    "against DC {base} + {level} = {dc}: {spell} is ruined.",
                    about,
                    values,
                    **figures,
                )
            return outcome(
                kind,
                "{name} counterspells with dispel magic: dispel check {check} = {total} "
                "against DC {base} + {level} = {dc}: {spell} goes on.",
                about,
                values,
                **figures,
            )
        if countered:
            return outcome(
                kind,
                "{name} counterspells with dispel magic: dispel check {check} = {total} "
                "against DC {base} + {level} = {dc}: the spell is ruined.",
                about,
                values,
                **figures,
            )
        return outcome(
            kind,
            "{name} counterspells with dispel magic: dispel check {check} = {total} "
            "against DC {base} + {level} = {dc}: the spell goes on.",
            about,
            values,
            **figures,
        )

    @staticmethod
    def _dispel_missing(
        kind: str, about: str | None, needs: Sequence[str], named: dict[str, OptionValue]
    ) -> RecordOutcome:
        """Dispel magic without the caster levels it needs, naming the spell as it is known."""
        missing, tags = _missing(needs)
        if "caster" in named and "spell" in named:
            return outcome(
                kind,
                "{name}'s dispel magic against {caster}'s {spell}: not computed, it needs the "
                "tags {tags}.",
                about,
                missing,
                tags=tags,
                **named,
            )
        if "caster" in named:
            return outcome(
                kind,
                "{name}'s dispel magic against {caster}'s spell: not computed, it needs the "
                "tags {tags}.",
                about,
                missing,
                tags=tags,
                **named,
            )
        if "spell" in named:
            return outcome(
                kind,
                "{name}'s dispel magic against {spell}: not computed, it needs the tags {tags}.",
                about,
                missing,
                tags=tags,
                **named,
            )
        return outcome(
            kind,
            "{name}'s dispel magic against the spell: not computed, it needs the tags {tags}.",
            about,
            missing,
            tags=tags,
            **named,
        )

    def _distract(
        self, readier: Combatant, caster: Combatant, facts: TriggerFacts, action: ActionSpec
    ) -> RecordOutcome:
        """A readied attack on a caster: its damage sets the Concentration DC (SRD)."""
        kind = "distraction"
        about = recorded_about(readier, caster)
        level = tag_number("spell_level", facts.tags, caster.tags)
        bonus = tag_number("concentration", facts.tags, caster.tags)
        damage_tag = _value("damage", action.tags, readier.tags)
        damage = Damage.parse(damage_tag) if damage_tag is not None else None
        needs = [
            n
            for n, v in (("spell_level", level), ("concentration", bonus), ("damage", damage))
            if v is None
        ]
        if level is None or bonus is None or damage is None:
            missing, tags = _missing(needs)
            return outcome(
                kind,
                "{name}'s readied attack on {caster}: not computed, it needs the tags {tags}.",
                about,
                missing,
                name=readier.name,
                caster=caster.name,
                tags=tags,
            )
        dealt, faces = damage.roll(self.dice)
        dc = CONCENTRATION_DC_BASE + dealt + level
        roll = self.dice.roll(20)
        lost = roll + bonus < dc
        spell = _value("spell", facts.tags, caster.tags)
        values: Values = (
            ("readier", readier.id),
            ("caster", caster.id),
            ("spell", spell and spell_name(spell)),
            ("spell_level", level),
            ("damage", dealt),
            ("damage_dice", str(damage)),
            ("damage_rolls", ",".join(map(str, faces))),
            ("dc", dc),
            ("d20", roll),
            ("concentration", bonus),
            ("total", roll + bonus),
            ("spell_lost", lost),
        )
        figures: dict[str, OptionValue] = {
            "name": readier.name,
            "caster": caster.name,
            "damage": dealt,
            # Dice and faces are the same in every language: " (1d8+3: 4)", or nothing.
            "rolled": f" ({damage}: {', '.join(map(str, faces))})" if faces else "",
            "base": CONCENTRATION_DC_BASE,
            "level": level,
            "dc": dc,
            "check": _plus(roll, bonus),
            "total": roll + bonus,
        }
        if spell is None and lost:
            return outcome(
                kind,
                "{name}'s readied attack on {caster}, if it hits for {damage} damage{rolled}: "
                "Concentration DC {base} + {damage} + {level} = {dc}; {caster} rolls {check} = "
                "{total}: the spell is lost.",
                about,
                values,
                **figures,
            )
        if spell is None:
            return outcome(
                kind,
                "{name}'s readied attack on {caster}, if it hits for {damage} damage{rolled}: "
                "Concentration DC {base} + {damage} + {level} = {dc}; {caster} rolls {check} = "
                "{total}: {caster} keeps the spell.",
                about,
                values,
                **figures,
            )
        if lost:
            # TRANSLATORS: {rolled} is empty, or the damage dice and their faces after a
            # space, e.g. " (1d8+3: 4)"; {check} is a d20 roll and a bonus, e.g. "12 + 5".
            return outcome(
                kind,
                "{name}'s readied attack on {caster}, if it hits for {damage} damage{rolled}: "
                "Concentration DC {base} + {damage} + {level} = {dc}; {caster} rolls {check} = "
                "{total}: {spell} is lost.",
                about,
                values,
                spell=spell_name(spell),
                **figures,
            )
        return outcome(
            kind,
            "{name}'s readied attack on {caster}, if it hits for {damage} damage{rolled}: "
            "Concentration DC {base} + {damage} + {level} = {dc}; {caster} rolls {check} = "
            "{total}: {caster} keeps {spell}.",
            about,
            values,
            spell=spell_name(spell),
            **figures,
        )

    def _set(
        self, readier: Combatant, charger: Combatant | None, action: ActionSpec
    ) -> RecordOutcome:
        """A weapon set against a charge deals double damage (SRD)."""
        kind = "set_against_charge"
        about = recorded_about(readier, charger)
        named: dict[str, OptionValue] = {"name": readier.name}
        if charger is not None:
            named["charger"] = charger.name
        damage_tag = _value("damage", action.tags, readier.tags)
        damage = Damage.parse(damage_tag) if damage_tag is not None else None
        if damage is None:
            values: Values = (("readier", readier.id), ("multiplier", SET_MULTIPLIER))
            if charger is None:
                return outcome(
                    kind,
                    "{name}'s weapon set against the charge: double damage if it hits.",
                    about,
                    values,
                    **named,
                )
            return outcome(
                kind,
                "{name}'s weapon set against {charger}'s charge: double damage if it hits.",
                about,
                values,
                **named,
            )
        # 3e multiplies rolled damage by rolling it again, modifiers and all.
        rolls = [damage.roll(self.dice) for _ in range(SET_MULTIPLIER)]
        dealt = sum(total for total, _ in rolls)
        values = (
            ("readier", readier.id),
            ("multiplier", SET_MULTIPLIER),
            ("damage_dice", str(damage)),
            *((f"damage_rolls_{n + 1}", ",".join(map(str, f))) for n, (_, f) in enumerate(rolls)),
            ("damage", dealt),
        )
        figures: dict[str, OptionValue] = {
            **named,
            "dice": str(damage),
            "times": SET_MULTIPLIER,
            "dealt": dealt,
        }
        if damage.count and charger is None:
            return outcome(
                kind,
                "{name}'s weapon set against the charge: double damage if it hits, {dice} rolled "
                "{times} times: {rolls} = {dealt}.",
                about,
                values,
                rolls=_faces(rolls),
                **figures,
            )
        if damage.count:
            # TRANSLATORS: {rolls} are the faces of each roll, e.g. "(3, 5) + (2, 6)".
            return outcome(
                kind,
                "{name}'s weapon set against {charger}'s charge: double damage if it hits, "
                "{dice} rolled {times} times: {rolls} = {dealt}.",
                about,
                values,
                rolls=_faces(rolls),
                **figures,
            )
        if charger is None:
            return outcome(
                kind,
                "{name}'s weapon set against the charge: double damage if it hits, {times} x "
                "{dice} = {dealt}.",
                about,
                values,
                **figures,
            )
        return outcome(
            kind,
            "{name}'s weapon set against {charger}'s charge: double damage if it hits, "
            "{times} x {dice} = {dealt}.",
            about,
            values,
            **figures,
        )


def _faces(rolls: Sequence[tuple[int, tuple[int, ...]]]) -> str:
    """Each roll's faces, as ``(3, 5) + (2, 6)``."""
    return " + ".join(f"({', '.join(map(str, faces))})" for _, faces in rolls)


def _counterspell(action: ActionSpec) -> bool:
    return action.kind == "cast" and "counterspell" in action.tags


def _key(combat: CombatView, window: Window) -> _WindowKey:
    # An undone window's id comes back for the next one: the moment and its facts tell them apart.
    return (combat.id, window.id, window.opened_at, window.facts)


plugin = Dnd3eReadyPlugin()
"""The instance the ``dnd3e-ready`` entry point names."""
