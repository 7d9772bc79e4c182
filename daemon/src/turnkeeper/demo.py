"""``turnkeeper demo``: the seeds' worked examples played through the engine, narrated.

Until the daemon exists (next issue) the scenes run in process. Initiative faces are the ones
that give the seeds' own numbers; everything else is rolled from a fixed seed, so the log is the
same on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from turnkeeper_engine import NARRATOR, Actor, Engine, RuleError, ScriptedDice, SeededDice
from turnkeeper_engine import commands as c
from turnkeeper_engine.dice import DiceSource
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts

from .narrate import narrate

DEMO_SEED = 616
"""Fixed seed for dice the scenes do not script, so the narrated log is reproducible."""


class _Table:
    """One scene: a combat, a clock that ticks a second per command, and the narrated log."""

    def __init__(self, out: Callable[[str], None], dice: DiceSource) -> None:
        self.engine = Engine(dice)
        self.out = out
        self.now = 0.0

    def __call__(self, command: c.Command, player: str | None = None) -> None:
        """Play ``command`` as the narrator, or as ``player`` (a user id) for their own."""
        self.now += 1.0
        actor = Actor("player", player) if player else NARRATOR
        result = self.engine.handle(command, self.now, actor)
        if isinstance(result, RuleError):
            raise RuntimeError(f"demo script refused at {command.name}: {result}")
        state = self.engine.state
        for event in result:
            line = narrate(event, state)
            if line:
                self.out(line)

    @property
    def turn(self) -> Any:
        assert self.engine.state.turn is not None
        return self.engine.state.turn.ref

    def end_turn(self) -> None:
        self(c.EndTurn(self.turn))

    def act(self, kind: str, description: str, *targets: str, **fields: Any) -> None:
        self(c.DeclareAction(self.turn, ActionSpec(kind, None, description, targets, **fields)))


def _scripted(faces: Iterable[int]) -> DiceSource:
    return ScriptedDice(faces)


def bank_robbery(out: Callable[[str], None]) -> None:
    """Seed: Spider-Man 20, Sabretooth 17, Wolverine 15, Doctor Octopus 14; two Fantastics."""
    t = _Table(out, SeededDice(DEMO_SEED))
    t(c.CreateCombat("bank", "marvel"))
    t(c.AddCombatant("spidey", "Spider-Man", "peter", True, init_mod=3))
    t(c.AddCombatant("sabretooth", "Sabretooth", init_mod=2))
    t(c.AddCombatant("wolverine", "Wolverine", "logan", True, init_mod=3))
    t(c.AddCombatant("ock", "Doctor Octopus", init_mod=3))
    t(c.RollInitiative("spidey", faces=(6, 5, 1)), "peter")
    t(c.RollInitiative("sabretooth", faces=(5, 4, 6)))
    t(c.RollInitiative("wolverine", faces=(4, 5, 3)), "logan")
    t(c.RollInitiative("ock", faces=(3, 2, 1)))
    t(c.StartCombat())
    t.act("attack", "webs the getaway van")
    t.end_turn()
    t.act("grab", "snatches the bank's gold bars")
    t.end_turn()
    t.act("attack", "swings at Sabretooth", "sabretooth")
    t.end_turn()
    out("  (Sabretooth holds his turn, waiting for Wolverine to commit.)")
    t(c.Hold(t.turn))
    t(c.TakeHeldTurn("sabretooth", "after", "wolverine"))
    t.act("attack", "slashes at Sabretooth", "sabretooth")
    t.end_turn()
    t.act("attack", "pounces on Wolverine", "wolverine")
    t.end_turn()
    t.end_turn()
    t(c.EndCombat())


def hydra_corner(out: Callable[[str], None]) -> None:
    """Seed: Captain America reserves a punch for whoever comes around the corner."""
    t = _Table(out, SeededDice(DEMO_SEED))
    t(c.CreateCombat("hydra-hq", "marvel"))
    t(c.AddCombatant("cap", "Captain America", "steve", True, init_mod=3))
    t(c.AddCombatant("agent", "Hydra agent", init_mod=1, tags=("hydra",)))
    t(c.RollInitiative("cap", faces=(5, 4, 3)), "steve")
    t(c.RollInitiative("agent", faces=(2, 3, 4)))
    t(c.StartCombat())
    t.act("move", "races around a corner, out of sight, and stops")
    corner = Predicate(events=("move",), tags=("hydra",), zones=("corner",))
    t(
        c.Reserve(
            t.turn,
            "standard",
            ActionSpec("attack", None, "punch"),
            Trigger("anyone who comes around the corner after him", corner),
        )
    )
    t.end_turn()
    t.act("move", "comes around the corner", zone="corner")
    window = t.engine.state.window
    assert window is not None
    t(c.ClaimReaction(window.id, "cap", t.engine.state.reservations[0].id))
    t(c.FinishReaction(window.id, "cap"))
    t.act("attack", "fires at Captain America", "cap")
    t.end_turn()
    out(f"  Order unchanged: {', '.join(t.engine.state.order)}.")
    t(c.EndCombat())


def mandarin(out: Callable[[str], None]) -> None:
    """Seed: three reserved actions go off together; fresh checks Carter 19, Cap 18, Mandarin
    15; the battle ends before the Mandarin's attack."""
    fresh_checks = (6, 6, 5, 5, 5, 5, 4, 4, 4)
    t = _Table(out, _scripted(fresh_checks))
    t(c.CreateCombat("brawl", "marvel"))
    t(c.AddCombatant("carter", "Sharon Carter", "sharon", True, init_mod=2))
    t(c.AddCombatant("cap", "Captain America", "steve", True, init_mod=3))
    t(c.AddCombatant("mandarin", "The Mandarin", init_mod=3))
    t(c.RollInitiative("carter", faces=(3, 3, 3)), "sharon")
    t(c.RollInitiative("cap", faces=(4, 4, 4)), "steve")
    t(c.RollInitiative("mandarin", faces=(5, 5, 5)))
    t(c.StartCombat())
    talk = Trigger("the Mandarin attacks")
    t(c.Reserve(t.turn, "standard", ActionSpec("attack", None, "disintegrate Carter"), talk))
    t.end_turn()
    t(c.Reserve(t.turn, "standard", ActionSpec("attack", None, "hurl his shield"), talk))
    t.end_turn()
    t(c.Reserve(t.turn, "standard", ActionSpec("escape", None, "elbow free and dive"), talk))
    out("  (The time for talk is over.)")
    t(
        c.AnnounceTrigger(
            TriggerFacts("announced", "mandarin", "attack", ("carter",), text="Mandarin attacks"),
            offer=("carter", "cap", "mandarin"),
        )
    )
    state = t.engine.state
    assert state.window is not None
    window = state.window.id
    reservation = {r.combatant: r.id for r in state.reservations}
    for who in ("carter", "cap", "mandarin"):
        t(c.ClaimReaction(window, who, reservation[who]))
    t(c.FinishReaction(window, "carter"))
    t(c.DefeatCombatant("mandarin"))
    t(c.FinishReaction(window, "cap"))
    t(c.EndCombat())


def doom(out: Callable[[str], None]) -> None:
    """Seed: the Invisible Woman surprises Doctor Doom mid-combat and attacks with an edge."""
    t = _Table(out, SeededDice(DEMO_SEED))
    t(c.CreateCombat("latveria", "marvel"))
    t(c.AddCombatant("sue", "Invisible Woman", "sue", True, init_mod=3))
    t(c.AddCombatant("doom", "Doctor Doom", init_mod=4))
    t(c.RollInitiative("doom", faces=(5, 5, 4)))
    t(c.RollInitiative("sue", faces=(3, 4, 2)), "sue")
    t(c.StartCombat())
    t.act("power", "blasts the Thing")
    t.end_turn()
    out("  (Doom fails to detect the invisible Sue sneaking up behind him.)")
    t(c.Surprise("doom", ("sue",)))
    t.act("attack", "strikes Doctor Doom from behind", "doom")
    t.end_turn()
    t.act("attack", "turns on the Invisible Woman", "sue")
    t.end_turn()
    t(c.EndCombat())


def goblin_cave(out: Callable[[str], None]) -> None:
    """dnd3e: Ready against a spellcaster, Delay, Refocus and the delay floor."""
    t = _Table(out, SeededDice(DEMO_SEED))
    t(c.CreateCombat("cave", "dnd3e"))
    t(c.AddCombatant("fighter", "Tordek", "ana", True, init_mod=1, dexterity=12))
    t(c.AddCombatant("wizard", "Mialee", "bo", True, init_mod=3, dexterity=16))
    t(c.AddCombatant("shaman", "Goblin shaman", init_mod=2, dexterity=14))
    t(c.AddCombatant("rogue", "Lidda", "cy", True, init_mod=4, dexterity=18))
    t(c.RollInitiative("rogue", faces=(16,)), "cy")
    t(c.RollInitiative("fighter", faces=(15,)), "ana")
    t(c.RollInitiative("shaman", faces=(10,)))
    t(c.RollInitiative("wizard", faces=(5,)), "bo")
    t(c.StartCombat())
    out("  (Lidda delays until the shaman shows what he does.)")
    t(c.Hold(t.turn))
    t(c.TakeHeldTurn("rogue", "after", "shaman"))
    casting = Predicate(events=("action_declared",), actors=("shaman",), kinds=("cast",))
    t(
        c.Reserve(
            t.turn,
            "standard",
            ActionSpec("attack", None, "strike to distract", ("shaman",)),
            Trigger("if the shaman starts casting a spell", casting),
        )
    )
    t.act("move", "steps up to the shaman")
    t.end_turn()
    t.act("cast", "begins casting a spell", "fighter")
    window = t.engine.state.window
    assert window is not None
    t(c.ClaimReaction(window.id, "fighter", t.engine.state.reservations[0].id))
    t(c.FinishReaction(window.id, "fighter"))
    t.end_turn()
    t.act("attack", "stabs the shaman", "shaman")
    t.end_turn()
    t(c.Refocus(t.turn))
    t.end_turn()
    out(f"  Order now: {', '.join(t.engine.state.order)}.")
    t.end_turn()
    t(c.Hold(t.turn))
    t.end_turn()
    t.end_turn()
    t.end_turn()
    t(c.EndCombat())


SCENES: tuple[tuple[str, Callable[[Callable[[str], None]], None]], ...] = (
    (
        "Marvel Multiverse: the bank robbery (initiative, Fantastic, bonus round, hold)",
        bank_robbery,
    ),
    ("Marvel Multiverse: around the corner (reserving an action)", hydra_corner),
    ("Marvel Multiverse: the Mandarin (simultaneous reserved actions)", mandarin),
    ("Marvel Multiverse: Doctor Doom (surprise mid-combat)", doom),
    ("D&D 3e: the goblin cave (delay, ready, refocus, the delay floor)", goblin_cave),
)


def run(out: Callable[[str], None] = print) -> None:
    """Play every scene, printing the narrated log."""
    for title, scene in SCENES:
        out("")
        out(f"### {title}")
        scene(out)
