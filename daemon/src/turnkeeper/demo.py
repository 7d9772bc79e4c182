"""``turnkeeper demo``: the seeds' worked examples played over the real protocol, narrated.

The demo starts a daemon on a temporary socket and data directory, then plays each scene with
scripted clients: the narrator's connection, one per player (each with its own player token),
and a watcher subscribed to the combat, whose event stream is what gets narrated. Every die is
supplied by whoever rolls it, with the faces that give the seeds' own numbers, and the
``dnd3e-ready`` plugin rolls on seeded dice (``turnkeeper.demo_plugins``), so the log of those
scenes is the same on every run. The log is told in the language asked for (``locale``): the
narrated events, and the scenes' own words too (names, actions, triggers), as a table would
type them.

The last scene is played by bots (:class:`turnkeeper_sdk.policy.SensibleBot`): each player's
bot over its own connection with its own token, and one for the narrator's NPCs, while the
narrator's script ends the fight after a few rounds. The bots type in the log's language too.
They choose with seeded randomness, but
their commands interleave as the machine schedules them and the daemon rolls the dice, so
that scene's log differs from run to run.
"""

from __future__ import annotations

import functools
import importlib.util
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from turnkeeper_engine import BUNDLED_RULES, State, evolve
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev
from turnkeeper_engine.errors import Arg
from turnkeeper_engine.model import ActionSpec, Predicate, Trigger, TriggerFacts
from turnkeeper_engine.plain import command_to_plain, event_from_plain
from turnkeeper_sdk.aio import AsyncClient
from turnkeeper_sdk.client import CallError, Client
from turnkeeper_sdk.policy import SensibleBot

from . import i18n
from .auth import Tokens
from .embedded import START_TIMEOUT, connect, spawn
from .narrate import narrate

_SEEDED_PLUGINS = (
    ("--no-plugins", "dnd3e-ready", "--plugin", "dnd3e-ready=turnkeeper.demo_plugins:dnd3e_ready")
    if importlib.util.find_spec("turnkeeper_dnd3e_ready") is not None
    else ()
)
"""The daemon's flags that run the installed dnd3e-ready plugin on seeded dice, so that the
rolls it makes are the same every run (see ``turnkeeper.demo_plugins``)."""


class _Session:
    """The embedded daemon and the demo's connections to it."""

    def __init__(self, out: Callable[[str], None], root: Path, locale: str) -> None:
        self.out = out
        self.locale = locale
        self.data_dir = root / "data"
        self.socket = root / "run" / "turnkeeper.sock"
        self.log = (root / "daemon.log").open("wb")
        self.process = spawn(self.data_dir, self.socket, self.log, *_SEEDED_PLUGINS)
        self.narrator = self._connect()
        self.narrator.hello(name="demo narrator")
        self.watcher = self._connect()
        self.watcher.hello(name="demo watcher", kind="bridge")
        self.players: dict[str, Client] = {}

    def _connect(self) -> Client:
        return connect(self.process, self.socket)

    def player(self, user: str) -> Client:
        """The player's own connection, authenticated with a player token bound to ``user``."""
        if user not in self.players:
            _, secret = Tokens(self.data_dir).add("player", user)
            client = self._connect()
            client.hello(secret, name=f"demo player {user}", kind="player")
            self.players[user] = client
        return self.players[user]

    def close(self) -> None:
        for client in (self.narrator, self.watcher, *self.players.values()):
            client.close()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=START_TIMEOUT)
        self.log.close()


class _Table:
    """One scene's combat: commands go out over the socket, the watcher's events come back."""

    def __init__(self, session: _Session) -> None:
        self.session = session
        self.out = session.out
        self.locale = session.locale
        self.state = State()
        self.combat = ""
        self.seq = 0
        self.requests = 0

    def __call__(self, command: c.Command, player: str | None = None) -> None:
        """Send ``command`` as the narrator, or as ``player`` (a user id) for their own."""
        params = command_to_plain(command)
        del params["command"]
        if isinstance(command, c.CreateCombat):
            self.combat = command.combat_id
        else:
            params["combat"] = self.combat
        self.requests += 1
        params["request_id"] = f"{self.combat}-{self.requests}"
        client = self.session.player(player) if player else self.session.narrator
        try:
            result = client.call(command.name, **params)
        except CallError as e:
            raise RuntimeError(f"demo script refused at {command.name}: {e}") from e
        if isinstance(command, c.CreateCombat):
            self.session.watcher.call("subscribe", combat=self.combat, after=0)
        self._follow(int(result["seq"]))

    def _follow(self, seq: int) -> None:
        """Narrate the watcher's events up to ``seq``."""
        while self.seq < seq:
            self._next_event()

    def _next_event(self) -> ev.Event:
        """Narrate the watcher's next event of this combat."""
        while True:
            note = self.session.watcher.notification()
            body = dict(note.params)
            if note.method == "event" and body.pop("combat") == self.combat:
                self.seq = int(body.pop("seq"))
                return self.tell(body)

    def until(self, event_name: str) -> None:
        """Narrate the watcher's events up to the next ``event_name``: what a plugin does after
        a command comes in its own time, and the script must not run ahead of it, or the log
        would change from run to run."""
        while self._next_event().name != event_name:
            pass

    def tell(self, body: dict[str, Any]) -> ev.Event:
        """Fold one event (its wire body, without ``combat`` and ``seq``) and narrate it."""
        event = event_from_plain(body)
        self.state = evolve(self.state, event)
        # The scenes play the bundled rulesets only.
        line = narrate(event, self.state, self.locale, rules=BUNDLED_RULES)
        if line:
            self.out(line)
        return event

    def say(self, template: str, **args: Arg) -> str:
        """The scene's own words (a string literal) in the log's language."""
        return i18n.message(self.locale, template, args)

    def order(self) -> str:
        """The initiative order as the table reads it: by name."""
        found = (self.state.get(i) for i in self.state.order)
        return ", ".join(c.name for c in found if c is not None)

    @property
    def turn(self) -> Any:
        assert self.state.turn is not None
        return self.state.turn.ref

    def end_turn(self) -> None:
        self(c.EndTurn(self.turn))

    def act(self, kind: str, description: str, *targets: str, **fields: Any) -> None:
        self(c.DeclareAction(self.turn, ActionSpec(kind, None, description, targets, **fields)))


def bank_robbery(t: _Table) -> None:
    """Seed: Spider-Man 20, Sabretooth 17, Wolverine 15, Doctor Octopus 14; two Fantastics."""
    t(c.CreateCombat("bank", "marvel"))
    t(c.AddCombatant("spidey", t.say("Spider-Man"), "peter", True, init_mod=3))
    t(c.AddCombatant("sabretooth", t.say("Sabretooth"), init_mod=2))
    t(c.AddCombatant("wolverine", t.say("Wolverine"), "logan", True, init_mod=3))
    t(c.AddCombatant("ock", t.say("Doctor Octopus"), init_mod=3))
    t(c.RollInitiative("spidey", faces=(6, 5, 1)), "peter")
    t(c.RollInitiative("sabretooth", faces=(5, 4, 6)))
    t(c.RollInitiative("wolverine", faces=(4, 5, 3)), "logan")
    t(c.RollInitiative("ock", faces=(3, 2, 1)))
    t(c.StartCombat())
    t.act("attack", t.say("webs the getaway van"))
    t.end_turn()
    t.act("grab", t.say("snatches the bank's gold bars"))
    t.end_turn()
    t.act("attack", t.say("swings at Sabretooth"), "sabretooth")
    t.end_turn()
    t.out("  " + t.say("(Sabretooth holds his turn, waiting for Wolverine to commit.)"))
    t(c.Hold(t.turn))
    t(c.TakeHeldTurn("sabretooth", "after", "wolverine"))
    t.act("attack", t.say("slashes at Sabretooth"), "sabretooth")
    t.end_turn()
    t.act("attack", t.say("pounces on Wolverine"), "wolverine")
    t.end_turn()
    t.end_turn()
    t(c.EndCombat())


def hydra_corner(t: _Table) -> None:
    """Seed: Captain America reserves a punch for whoever comes around the corner."""
    t(c.CreateCombat("hydra-hq", "marvel"))
    t(c.AddCombatant("cap", t.say("Captain America"), "steve", True, init_mod=3))
    t(c.AddCombatant("agent", t.say("Hydra agent"), init_mod=1, tags=("hydra",)))
    t(c.RollInitiative("cap", faces=(5, 4, 3)), "steve")
    t(c.RollInitiative("agent", faces=(2, 3, 4)))
    t(c.StartCombat())
    t.act("move", t.say("races around a corner, out of sight, and stops"))
    corner = Predicate(events=("move",), tags=("hydra",), zones=("corner",))
    t(
        c.Reserve(
            t.turn,
            "standard",
            ActionSpec("attack", None, t.say("punch")),
            Trigger(t.say("anyone who comes around the corner after him"), corner),
        )
    )
    t.end_turn()
    t.act("move", t.say("comes around the corner"), zone="corner")
    window = t.state.window
    assert window is not None
    t(c.ClaimReaction(window.id, "cap", t.state.reservations[0].id))
    t(c.FinishReaction(window.id, "cap"))
    t.act("attack", t.say("fires at Captain America"), "cap")
    t.end_turn()
    t.out("  " + t.say("Order unchanged: {order}.", order=t.order()))
    t(c.EndCombat())


def mandarin(t: _Table) -> None:
    """Seed: three reserved actions go off together; fresh checks Carter 19, Cap 18, Mandarin
    15; the battle ends before the Mandarin's attack."""
    t(c.CreateCombat("brawl", "marvel"))
    t(c.AddCombatant("carter", t.say("Sharon Carter"), "sharon", True, init_mod=2))
    t(c.AddCombatant("cap", t.say("Captain America"), "steve", True, init_mod=3))
    t(c.AddCombatant("mandarin", t.say("The Mandarin"), init_mod=3))
    t(c.RollInitiative("carter", faces=(3, 3, 3)), "sharon")
    t(c.RollInitiative("cap", faces=(4, 4, 4)), "steve")
    t(c.RollInitiative("mandarin", faces=(5, 5, 5)))
    t(c.StartCombat())
    talk = Trigger(t.say("the Mandarin attacks"))
    disintegrate = ActionSpec("attack", None, t.say("disintegrate Carter"))
    t(c.Reserve(t.turn, "standard", disintegrate, talk))
    t.end_turn()
    t(c.Reserve(t.turn, "standard", ActionSpec("attack", None, t.say("hurl his shield")), talk))
    t.end_turn()
    dive = ActionSpec("escape", None, t.say("elbow free and dive"))
    t(c.Reserve(t.turn, "standard", dive, talk))
    t.out("  " + t.say("(The time for talk is over.)"))
    attack = t.say("Mandarin attacks")
    t(
        c.AnnounceTrigger(
            TriggerFacts("announced", "mandarin", "attack", ("carter",), text=attack),
            offer=("carter", "cap", "mandarin"),
        )
    )
    state = t.state
    assert state.window is not None
    window = state.window.id
    reservation = {r.combatant: r.id for r in state.reservations}
    # Everyone involved makes a new initiative check (R12), each with their own dice.
    t(c.ClaimReaction(window, "carter", reservation["carter"], faces=(6, 6, 5)), "sharon")
    t(c.ClaimReaction(window, "cap", reservation["cap"], faces=(5, 5, 5)), "steve")
    t(c.ClaimReaction(window, "mandarin", reservation["mandarin"], faces=(4, 4, 4)))
    t(c.FinishReaction(window, "carter"))
    t(c.DefeatCombatant("mandarin"))
    t(c.FinishReaction(window, "cap"))
    t(c.EndCombat())


def doom(t: _Table) -> None:
    """Seed: the Invisible Woman surprises Doctor Doom mid-combat and attacks with an edge."""
    t(c.CreateCombat("latveria", "marvel"))
    t(c.AddCombatant("sue", t.say("Invisible Woman"), "sue", True, init_mod=3))
    t(c.AddCombatant("doom", t.say("Doctor Doom"), init_mod=4))
    t(c.RollInitiative("doom", faces=(5, 5, 4)))
    t(c.RollInitiative("sue", faces=(3, 4, 2)), "sue")
    t(c.StartCombat())
    t.act("power", t.say("blasts the Thing"))
    t.end_turn()
    t.out("  " + t.say("(Doom fails to detect the invisible Sue sneaking up behind him.)"))
    t(c.Surprise("doom", ("sue",)))
    t.act("attack", t.say("strikes Doctor Doom from behind"), "doom")
    t.end_turn()
    t.act("attack", t.say("turns on the Invisible Woman"), "sue")
    t.end_turn()
    t(c.EndCombat())


def goblin_cave(t: _Table) -> None:
    """dnd3e: Ready against a spellcaster, Delay, Refocus and the delay floor."""
    t(c.CreateCombat("cave", "dnd3e"))
    t(c.AddCombatant("fighter", "Tordek", "ana", True, init_mod=1, dexterity=12))
    t(c.AddCombatant("wizard", "Mialee", "bo", True, init_mod=3, dexterity=16))
    # The tags carry what the dnd3e-ready plugin needs to compute Concentration (R11).
    shaman = t.say("Goblin shaman")
    t(c.AddCombatant("shaman", shaman, init_mod=2, dexterity=14, tags=("concentration:4",)))
    t(c.AddCombatant("rogue", "Lidda", "cy", True, init_mod=4, dexterity=18))
    t(c.RollInitiative("rogue", faces=(16,)), "cy")
    t(c.RollInitiative("fighter", faces=(15,)), "ana")
    t(c.RollInitiative("shaman", faces=(10,)))
    t(c.RollInitiative("wizard", faces=(5,)), "bo")
    t(c.StartCombat())
    t.out("  " + t.say("(Lidda delays until the shaman shows what he does.)"))
    t(c.Hold(t.turn))
    t(c.TakeHeldTurn("rogue", "after", "shaman"))
    casting = Predicate(events=("action_declared",), actors=("shaman",), kinds=("cast",))
    t(
        c.Reserve(
            t.turn,
            "standard",
            ActionSpec("attack", None, t.say("strike to distract"), ("shaman",), ("damage:7",)),
            Trigger(t.say("the shaman starts casting a spell"), casting),
        )
    )
    t.act("move", t.say("steps up to the shaman"))
    t.end_turn()
    spell = ("spell:sleep", "spell_level:1")
    t.act("cast", t.say("begins casting a spell"), "fighter", tags=spell)
    window = t.state.window
    assert window is not None
    t(c.ClaimReaction(window.id, "fighter", t.state.reservations[0].id))
    if _SEEDED_PLUGINS:
        # The claim closes the window: the dnd3e-ready plugin, when installed, resolves the
        # readied attack's special (the shaman's Concentration check) from its after-hook.
        t.until("outcome_recorded")
    t(c.FinishReaction(window.id, "fighter"))
    t.end_turn()
    t.act("attack", t.say("stabs the shaman"), "shaman")
    t.end_turn()
    t(c.Refocus(t.turn))
    t.end_turn()
    t.out("  " + t.say("Order now: {order}.", order=t.order()))
    t.end_turn()
    t(c.Hold(t.turn))
    t.end_turn()
    t.end_turn()
    t.end_turn()
    t(c.EndCombat())


SKIRMISH_ROUNDS = 3
"""Rounds the bots fight before the narrator ends the skirmish: enough for holds, reserved
actions and reactions to come up, short enough to read."""
SKIRMISH_SECONDS = 30.0
"""Seconds the skirmish may take at most. Bots answer in milliseconds and the whole scene takes
about one; a demo that stopped moving must fail, not hang."""


def skirmish(t: _Table) -> None:
    """Bots: the players' bots and the narrator's fight; the narrator ends it after 3 rounds."""
    anyio.run(_skirmish, t)


async def _skirmish(t: _Table) -> None:
    session = t.session
    secrets = {user: Tokens(session.data_dir).add("player", user)[1] for user in ("peter", "clint")}
    combat = t.combat = "skirmish"
    with anyio.fail_after(SKIRMISH_SECONDS):
        async with (
            AsyncClient.unix(session.socket, name="demo narrator bot", kind="bot") as narrator,
            AsyncClient.unix(session.socket, name="demo skirmish watcher") as watcher,
            AsyncClient.unix(session.socket, token=secrets["peter"], kind="bot") as peter,
            AsyncClient.unix(session.socket, token=secrets["clint"], kind="bot") as clint,
            anyio.create_task_group() as bots,
        ):
            plugins = {p["name"] for p in (await narrator.list_plugins())["loaded"]}
            # With the auto-reactions plugin, Hawkeye hands his reactions over: it shoots back
            # at whoever attacks him, and answers his windows for him.
            hawkeye = ["auto", "react:attack:attack:self"] if "auto-reactions" in plugins else []
            await narrator.create_combat(combat_id=combat, ruleset="marvel")
            for fields in (
                {"id": "spidey", "display_name": t.say("Spider-Man"), "controller": "peter"},
                {"id": "hawkeye", "display_name": t.say("Hawkeye"), "controller": "clint"},
                {"id": "crossbones", "display_name": t.say("Crossbones"), "init_mod": 2},
                {"id": "agent1", "display_name": t.say("Hydra agent {n}", n=1), "group": "hydra"},
                {"id": "agent2", "display_name": t.say("Hydra agent {n}", n=2), "group": "hydra"},
            ):
                pc = fields.get("controller") is not None
                tags = hawkeye if fields["id"] == "hawkeye" else []
                await narrator.add_combatant(combat, player_character=pc, tags=tags, **fields)
            t.out(
                "  "
                + t.say(
                    "(Bots play from here: one for each player (Spider-Man, Hawkeye) and one "
                    "for the narrator (Crossbones, the Hydra agents); the narrator ends the "
                    "fight after round {rounds}.)",
                    rounds=SKIRMISH_ROUNDS,
                )
            )
            # The bots type in the table's language, as the players would.
            words = functools.partial(i18n.message, t.locale)
            async with watcher.subscribe(combat, after=0) as events:
                for seed, client in enumerate((narrator, peter, clint), 1):
                    bot = SensibleBot(client, seed=seed, words=words)
                    bots.start_soon(bot.play, combat)
                await narrator.start_combat(combat)
                ending = False
                async for plain in events:
                    event = t.tell({k: v for k, v in plain.items() if k not in ("combat", "seq")})
                    if event.name == "combat_ended":
                        break
                    over = (t.state.round or 0) > SKIRMISH_ROUNDS
                    if event.name == "round_started" and over and not ending:
                        ending = True
                        await narrator.end_combat(combat)


SCENES: tuple[tuple[str, Callable[[_Table], None]], ...] = (
    (
        i18n.N_("Marvel Multiverse: the bank robbery (initiative, Fantastic, bonus round, hold)"),
        bank_robbery,
    ),
    (i18n.N_("Marvel Multiverse: around the corner (reserving an action)"), hydra_corner),
    (i18n.N_("Marvel Multiverse: the Mandarin (simultaneous reserved actions)"), mandarin),
    (i18n.N_("Marvel Multiverse: Doctor Doom (surprise mid-combat)"), doom),
    (i18n.N_("D&D 3e: the goblin cave (delay, ready, refocus, the delay floor)"), goblin_cave),
    (i18n.N_("Bots: a skirmish (SensibleBot players and NPCs over the socket)"), skirmish),
)


def run(out: Callable[[str], None] = print, locale: str = i18n.DEFAULT) -> None:
    """Start an embedded daemon, play every scene through it, and print the narrated log in
    ``locale`` (a BCP 47 tag, negotiated: ``pt`` is told in pt-BR, an unknown one in English)."""
    locale = i18n.negotiate(locale)
    with tempfile.TemporaryDirectory(prefix="turnkeeper-demo-") as root:
        session = _Session(out, Path(root), locale)
        try:
            for title, scene in SCENES:
                out("")
                out("### " + i18n.message(locale, title))
                scene(_Table(session))
        finally:
            session.close()
