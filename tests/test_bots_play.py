"""Bots play whole combats against a real daemon with the bundled plugins, and the engine's
invariants hold over every narrator event stream (R1, R5, R9–R12, R15, R16).

Each combat has player characters played by one :class:`SensibleBot` per player (its own player
token, over its own connection), narrator-run NPCs played by a narrator bot, and a director:
the narrator's script, which sets the combat up with random rule options (windows that wait,
turn timers shorter than a busy bot takes), stirs it between rounds (defeats, revivals,
removals, newcomers, conditions, marvel surprises and announcements offering reactions, undos)
and ends it after two to four rounds. Some combatants are tagged ``auto``, so the
``auto-reactions`` plugin answers their windows; tags feed the ``surprise`` and ``dnd3e-ready``
plugins. Combats run concurrently. Afterwards each combat's whole narrator stream is checked:

- seqs run 1, 2, 3, ... with no gap; no plugin was disabled; the combat went past its last
  round and ended, never went ``STALL`` seconds without an event, and every bot returned;
- over the story without the undone commands: turns open one at a time, ``turn_started`` and
  ``turn_ended``/``turn_held`` alternate, no combatant takes two turns in a round and everyone
  due takes one (R5), rounds go up by one (the property tests' own check); one window at a
  time, every window opened is closed (or the combat ended), claims resolve one after another,
  every sequence ends (R12);
- replaying the whole stream (``event_from_plain`` + ``evolve``) gives exactly the daemon's
  final view;
- every refusal a bot or the director met was a stale one.

``TURNKEEPER_BOT_COMBATS`` sets the number of combats per ruleset (100 by default).
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon import Daemon, running
from test_properties import turn_history_problems
from turnkeeper_engine import (
    BUNDLED_RULES,
    NARRATOR,
    Actor,
    Engine,
    SeededDice,
    State,
    View,
    evolve,
    from_plain,
    to_plain,
    view,
)
from turnkeeper_engine import commands as cmd
from turnkeeper_engine.model import (
    ActionSpec,
    Combatant,
    Predicate,
    Trigger,
    TriggerFacts,
    Turn,
    TurnRef,
)
from turnkeeper_engine.plain import event_from_plain
from turnkeeper_sdk.aio import AsyncClient, Event
from turnkeeper_sdk.bot import STALE, Bot
from turnkeeper_sdk.errors import CallError, ConnectionLost
from turnkeeper_sdk.policy import SensibleBot
from turnkeeper_sdk.views import CombatView

COMBATS = int(os.environ.get("TURNKEEPER_BOT_COMBATS", "100"))
"""Combats per ruleset; CI plays 100, a soak run more."""
CONCURRENT = 32
"""Combats in play at once: enough to keep both cores busy without starving the daemon."""
PLAYERS = ("ana", "bo", "cy")
PLUGINS = {"rulesets", "surprise", "auto-reactions", "dnd3e-ready"}
STALL = 20.0
"""Seconds a combat may go without an event before it counts as stuck: bots answer in
milliseconds, so this only ever trips on a real deadlock."""
WAIT = 10.0
"""Seconds any one step of the focused tests may take."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with running(tmp_path) as d:
        yield d


# ---------------------------------------------------------------------------- the checks


def _bodies(events: list[Event]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("combat", "seq")} for e in events]


def effective(events: list[Event]) -> list[Event]:
    """The stream without the commands undone (R15), nor the undos: what the combat's story
    is now. Each command's events start with its ``command_recorded``."""
    commands: list[list[Event]] = []
    for e in events:
        if e["event"] == "command_recorded":
            commands.append([e])
        elif e["event"] == "command_undone":
            commands.pop()  # the undo itself
            commands.pop()  # the command it took back
        else:
            commands[-1].append(e)
    return [e for command in commands for e in command]


def window_problems(events: list[Event]) -> list[str]:
    """R12 over a story: one window at a time, each closed (or the combat ended), its claims
    resolving one after another, its sequence ended; nothing after the end."""
    problems: list[str] = []
    window: str | None = None
    claims = 0
    resolving = False
    reacting: str | None = None
    ended = False
    for e in events:
        name = e["event"]
        if ended:
            problems.append(f"{name} after combat_ended")
        elif name == "window_opened":
            if window is not None:
                problems.append(f"window {e['window']['id']} opened while {window} was open")
            window, claims, resolving = e["window"]["id"], 0, False
        elif name == "reaction_claimed":
            claims += 1
        elif name == "reaction_cancelled" and not resolving:
            claims -= 1
        elif name == "window_closed":
            if e["window"] != window or resolving:
                problems.append(f"window {e['window']} closed while {window} was open")
            resolving = claims > 0
            window = window if resolving else None
        elif name == "reaction_started":
            if not resolving or reacting is not None:
                problems.append(f"{e['combatant']} reacts in {window}, reacting: {reacting}")
            reacting = e["combatant"]
        elif name in ("reaction_finished", "reaction_cancelled") and e["combatant"] == reacting:
            reacting = None
        elif name == "sequence_ended":
            if not resolving or reacting is not None:
                problems.append(f"sequence of {e['window']} ended with {reacting} reacting")
            window, resolving = None, False
        elif name == "combat_ended":
            ended = True
    if not ended:
        problems.append("the combat never ended")
    return problems


def replay_problems(events: list[Event], final: dict[str, Any]) -> list[str]:
    """Folding the stream must give exactly the daemon's own view of the combat."""
    state = State()
    for body in _bodies(events):
        state = evolve(state, event_from_plain(body))
    if to_plain(view(state, NARRATOR)) != final:
        return ["replaying the stream does not give the daemon's view"]
    return []


# ---------------------------------------------------------------------------- the director


@dataclass
class Outcome:
    """What one ruleset's run produced, summed over its combats."""

    problems: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    """Commands recorded, by ``via`` (a plugin's name) or by command for everyone else."""
    seconds: float = 0.0


def _combatants(rng: random.Random, ruleset: str) -> list[dict[str, Any]]:
    """Three to five player characters for the three players, two to four NPCs, tagged so
    that every bundled plugin has work: ``auto`` (auto-reactions), stealth and invisibility
    (surprise), spell and damage figures (dnd3e-ready)."""
    people: list[dict[str, Any]] = []
    owners = list(PLAYERS) + rng.sample(PLAYERS, rng.randrange(3))
    npcs = rng.randrange(2, 5)
    sneaky = ruleset == "marvel" and rng.random() < 0.3
    for i, owner in enumerate(owners):
        tags = ["auto"] if rng.random() < 0.3 else []
        if ruleset == "marvel" and tags and rng.random() < 0.5:
            tags.append("react:attack:attack:self")
        people.append(
            {
                "id": f"pc{i}",
                "display_name": f"PC {i} ({owner})",
                "controller": owner,
                "player_character": True,
                "init_mod": rng.randrange(-1, 5),
                "dexterity": rng.randrange(8, 18),
                "tags": tags,
            }
        )
    for i in range(npcs):
        tags = ["auto"] if rng.random() < 0.3 else []
        if sneaky:
            tags.append(f"stealth:{rng.randrange(0, 4)}")
        if ruleset == "marvel" and rng.random() < 0.15:
            tags.append("invisible")
        people.append(
            {
                "id": f"npc{i}",
                "display_name": f"NPC {i}",
                "init_mod": rng.randrange(-1, 5),
                "dexterity": rng.randrange(8, 18),
                "group": "minions" if i < 2 and rng.random() < 0.3 else None,
                "tags": tags,
                "hidden": i == 0 and rng.random() < 0.25,
            }
        )
    for c in people:
        if ruleset == "dnd3e":
            c["tags"] += ["spell:magic_missile", "spell_level:1", "concentration:4"]
            c["tags"] += ["caster_level:3", "damage:1d8+2"]
    return people


def _options(rng: random.Random, ruleset: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if rng.random() < 0.1:
        # Windows wait for answers (the daemon's clock closes them): every declared action
        # opens one, and late joiners have time to claim.
        options["window_deadline"] = 0.05
    if rng.random() < 0.1:
        # The shortest turn timer there is (R13): on a busy machine the clock ends or holds
        # turns while bots decide.
        options["turn_time_limit"] = 1.0
        options["turn_warning"] = 0.5
        options["turn_expiry"] = rng.choice(["end_turn", "hold"])
    if ruleset == "marvel":
        options["reaction_refresh"] = rng.choice(["own_turn", "round_start"])
    else:
        options["ready"] = rng.choice(["3.0", "3.5"])
        options["delay"] = rng.choice(["3.0", "3.5"])
    return options


class Director:
    """The narrator's script for one combat: set up, stir, end after a few rounds, record."""

    def __init__(self, client: AsyncClient, ruleset: str, n: int, seed: int) -> None:
        self.client = client
        self.ruleset = ruleset
        self.combat = f"{ruleset}-{n}"
        self.rng = random.Random(seed)
        self.rounds = self.rng.randrange(2, 5)
        self.events: list[Event] = []
        self.refused: Counter[str] = Counter()
        self.problems: list[str] = []
        self.newcomers = 0
        self.ending = False

    async def command(self, method: str, **params: Any) -> None:
        try:
            await self.client.call(method, combat=self.combat, **params)
        except CallError as e:
            self.refused[e.code] += 1

    async def set_up(self) -> None:
        await self.client.create_combat(
            combat_id=self.combat, ruleset=self.ruleset, options=_options(self.rng, self.ruleset)
        )
        for c in _combatants(self.rng, self.ruleset):
            await self.client.add_combatant(self.combat, **c)

    async def run(self, start: Callable[[], Awaitable[None]]) -> None:
        """Follow the combat from its first event, start it, stir it, end it."""
        async with self.client.subscribe(self.combat, after=0) as events:
            await start()
            await self.client.start_combat(self.combat)
            while True:
                event: Event | None = None
                with anyio.move_on_after(STALL):
                    event = await events.__anext__()
                if event is None:
                    await self.stuck()
                    continue
                self.events.append(event)
                if event["event"] == "combat_ended":
                    return
                if event["event"] == "round_started" and not self.ending:
                    if event["round"] > self.rounds:
                        # Bots may play on meanwhile (even a round more): it ends when it ends.
                        self.ending = True
                        await self.client.end_combat(self.combat)
                    else:
                        await self.stir()

    async def stuck(self) -> None:
        snapshot = await self.client.get_combat(self.combat)
        v = snapshot["view"]
        self.problems.append(
            f"{self.combat}: no event for {STALL:g} s at seq {snapshot['seq']}: "
            f"phase {v['phase']}, turn {v['turn']}, window {v['window']}, holds {v['holds']}"
        )
        self.ending = True
        await self.command("end_combat")

    async def stir(self) -> None:
        """What a narrator does between turns now and then."""
        snapshot = await self.client.get_combat(self.combat)
        combat = CombatView(from_plain(View, snapshot["view"]), snapshot["seq"], BUNDLED_RULES)
        rng = self.rng
        active = [c for c in combat.order() if c.status == "active"]
        seen = [c for c in active if not c.hidden]
        defeated = [c for c in combat.combatants if c.status == "defeated"]
        if defeated and rng.random() < 0.5:
            await self.command("revive_combatant", combatant=rng.choice(defeated).id)
        elif len(active) > 3 and rng.random() < 0.15:
            await self.command("defeat_combatant", combatant=rng.choice(active).id)
        elif len(active) > 3 and rng.random() < 0.05:
            await self.command("remove_combatant", combatant=rng.choice(active).id)
        if rng.random() < 0.15:
            self.newcomers += 1
            await self.command(
                "add_combatant",
                id=f"late{self.newcomers}",
                display_name=f"Latecomer {self.newcomers}",
                tags=["auto"] if rng.random() < 0.5 else [],
            )
        if seen and rng.random() < 0.1:
            target = rng.choice(seen)
            await self.command(
                "apply_condition", target=target.id, type="custom", anchor=rng.choice(seen).id
            )
        if self.ruleset == "marvel" and len(seen) > 1 and rng.random() < 0.1:
            target, by = rng.sample(seen, 2)
            await self.command("surprise", target=target.id, by=[by.id])
        if self.ruleset == "marvel" and seen and rng.random() < 0.2:
            shouter = rng.choice(seen)
            offer = rng.sample([c.id for c in active], min(2, len(active)))
            facts = TriggerFacts("shout", shouter.id, text=f"{shouter.name} shouts")
            await self.command("announce_trigger", facts=to_plain(facts), offer=offer)
        if rng.random() < 0.1:
            # Take back the last command or two, whoever sent them (R15); an undone start is
            # started again.
            for _ in range(rng.randrange(1, 3)):
                await self.command("undo")
            phase = (await self.client.get_combat(self.combat))["view"]["phase"]
            if phase in ("setup", "initiative"):
                await self.command("start_combat")

    def check(self, final: dict[str, Any]) -> list[str]:
        seqs = [e["seq"] for e in self.events]
        problems = [] if seqs == list(range(1, len(seqs) + 1)) else ["seqs have gaps"]
        problems += [
            f"plugin {e['plugin']} was disabled: {e['reason']}"
            for e in self.events
            if e["event"] == "plugin_disabled"
        ]
        story = effective(self.events)
        problems += turn_history_problems([event_from_plain(b) for b in _bodies(story)])
        problems += window_problems(story)
        problems += replay_problems(self.events, final)
        last = max((e["round"] for e in story if e["event"] == "round_started"), default=0)
        if last <= self.rounds:
            problems.append(f"ended in round {last}, before {self.rounds + 1}")
        return self.problems + [f"{self.combat}: {p}" for p in problems]


async def play_many(daemon: Daemon, ruleset: str, count: int, seed: int) -> Outcome:
    """``count`` combats of ``ruleset``, ``CONCURRENT`` at a time, played by bots."""
    tokens = {user: daemon.token("player", "--user", user) for user in PLAYERS}
    outcome = Outcome()
    started = anyio.current_time()
    async with (
        AsyncClient.unix(daemon.socket, name="director") as director,
        AsyncClient.unix(daemon.socket, name="npc bot", kind="bot") as narrator,
        AsyncClient.unix(daemon.socket, token=tokens["ana"], kind="bot") as ana,
        AsyncClient.unix(daemon.socket, token=tokens["bo"], kind="bot") as bo,
        AsyncClient.unix(daemon.socket, token=tokens["cy"], kind="bot") as cy,
    ):
        loaded = {p["name"] for p in (await director.list_plugins())["loaded"]}
        assert loaded >= PLUGINS, f"bundled plugins missing: {PLUGINS - loaded}"
        bots: list[Bot] = [SensibleBot(narrator, seed=seed)]
        bots += [SensibleBot(client, seed=seed + i) for i, client in enumerate((ana, bo, cy), 1)]
        limit = anyio.CapacityLimiter(CONCURRENT)

        async def one(n: int) -> None:
            async with limit:
                d = Director(director, ruleset, n, seed * 1000 + n)
                await d.set_up()
                returned: list[Bot] = []
                all_returned = anyio.Event()

                async def play(bot: Bot) -> None:
                    await bot.play(d.combat)
                    returned.append(bot)
                    if len(returned) == len(bots):
                        all_returned.set()

                async with anyio.create_task_group() as tg:

                    async def start() -> None:
                        for bot in bots:
                            tg.start_soon(play, bot)

                    await d.run(start)
                    with anyio.move_on_after(STALL):
                        await all_returned.wait()
                    if not all_returned.is_set():
                        outcome.problems.append(f"{d.combat}: a bot did not see the end")
                        tg.cancel_scope.cancel()
                final = await director.get_combat(d.combat)
                outcome.problems.extend(d.check(final["view"]))
                outcome.refused.update({f"director:{k}": v for k, v in d.refused.items()})
                for e in d.events:
                    if e["event"] == "command_recorded":
                        via = e["actor"]["via"] or ""
                        outcome.commands[via if via.startswith("plugin:") else e["command"]] += 1

        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
        for bot in bots:
            outcome.refused.update(bot.refused)
    outcome.seconds = anyio.current_time() - started
    return outcome


def test_r16_a_hidden_attacker_never_leaves_a_window_waiting_on_a_blind_player() -> None:
    """Found by the bots: a hidden NPC attacked a player character whose reservation waited for
    exactly that; the window waited for the player's answer, yet the player could not see it,
    and the combat stalled. A hidden actor's moment now fires no player's predicate."""
    engine = Engine(SeededDice(1), rules=BUNDLED_RULES)
    ana = Actor("player", "ana")
    predicate = Predicate(kinds=("attack",), targets=("pc",))
    for command, actor in (
        (cmd.CreateCombat("x", "marvel"), NARRATOR),
        (cmd.AddCombatant("pc", "PC", "ana", True, faces=(6, 6, 5)), NARRATOR),
        (cmd.AddCombatant("npc", "NPC", hidden=True, faces=(2, 2, 2)), NARRATOR),
        (cmd.StartCombat(), NARRATOR),
        (
            cmd.Reserve(
                TurnRef(1, "pc"),
                "standard",
                ActionSpec("attack"),
                Trigger("if anyone attacks me", predicate),
            ),
            ana,
        ),
        (cmd.EndTurn(TurnRef(1, "pc")), ana),
        (cmd.DeclareAction(TurnRef(1, "npc"), ActionSpec("attack", targets=("pc",))), NARRATOR),
    ):
        assert isinstance(engine.handle(command, 0.0, actor), list)
    assert engine.state.window is None
    assert view(engine.state, ana).window is None
    # The reservation is still there for a moment the player can see.
    assert [r.combatant for r in engine.state.reservations] == ["pc"]


# ---------------------------------------------------------------------------- the runs


PLUGIN_WORK = {
    "marvel": ("plugin:auto-reactions", "plugin:surprise"),
    "dnd3e": ("plugin:auto-reactions", "plugin:dnd3e-ready"),
}
"""Plugins that must have proposed commands over a full run of each ruleset."""


@pytest.mark.anyio
@pytest.mark.parametrize("ruleset", ["marvel", "dnd3e"])
async def test_bots_play_full_combats_and_the_invariants_hold(daemon: Daemon, ruleset: str) -> None:
    outcome = await play_many(daemon, ruleset, COMBATS, seed=7 if ruleset == "marvel" else 11)
    print(f"{ruleset}: {COMBATS} combats in {outcome.seconds:.1f} s; {dict(outcome.commands)}")
    print(f"refused: {dict(outcome.refused)}")
    assert outcome.problems == []
    unexpected = {
        code: n for code, n in outcome.refused.items() if code.split(":")[-1] not in STALE
    }
    assert unexpected == {}
    assert outcome.commands["end_turn"] > 0
    assert outcome.commands["claim_reaction"] > 0
    if COMBATS >= 50:
        for via in PLUGIN_WORK[ruleset]:
            assert outcome.commands[via] > 0, f"{via} never acted"


# ---------------------------------------------------------------------------- the Bot base


async def _duel(client: AsyncClient, combat: str, ruleset: str = "marvel") -> None:
    """ana's hero (first) against a narrator-run villain; round 1, the hero's turn."""
    await client.create_combat(combat_id=combat, ruleset=ruleset)
    faces = (6, 6, 6) if ruleset == "marvel" else (20,)
    low = (2, 2, 2) if ruleset == "marvel" else (2,)
    await client.add_combatant(
        combat, id="hero", display_name="Hero", controller="ana", player_character=True, faces=faces
    )
    await client.add_combatant(combat, id="villain", display_name="Villain", faces=low)
    await client.start_combat(combat)


class Recorder(Bot):
    """Records its callbacks and otherwise does nothing: the script decides."""

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self.turns: list[tuple[int, str, tuple[str, ...]]] = []
        self.ended = anyio.Event()

    async def on_my_turn(self, combat: CombatView, turn: Turn, combatant: Combatant) -> None:
        self.turns.append((turn.round, combatant.id, turn.used))

    async def on_combat_end(self, combat: CombatView) -> None:
        self.ended.set()


@pytest.mark.anyio
async def test_a_bot_whose_events_stop_ends_with_the_clients_own_error(daemon: Daemon) -> None:
    """Unsubscribed under it, a bot would wait forever; it ends with ConnectionLost, raised as
    such (not wrapped in the bot's task group), so ``except ConnectionLost`` catches it."""
    secret = daemon.token("player", "--user", "ana")
    async with (
        AsyncClient.unix(daemon.socket) as narrator,
        AsyncClient.unix(daemon.socket, token=secret) as ana,
    ):
        await _duel(narrator, "gone")
        bot = Recorder(ana)

        async def unsubscribe_once_playing() -> None:
            while not bot.turns:
                await anyio.sleep(0.01)
            await ana.unsubscribe("gone")

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(unsubscribe_once_playing)
                with pytest.raises(ConnectionLost, match="subscription to gone was ended"):
                    await bot.play("gone")


@pytest.mark.anyio
async def test_a_bot_handles_each_turn_once_however_many_events_wake_it(daemon: Daemon) -> None:
    secret = daemon.token("player", "--user", "ana")
    async with (
        AsyncClient.unix(daemon.socket) as narrator,
        AsyncClient.unix(daemon.socket, token=secret) as ana,
        anyio.create_task_group() as tg,
    ):
        await _duel(narrator, "once")
        bot = Recorder(ana)
        tg.start_soon(bot.play, "once")
        with anyio.fail_after(WAIT):
            while not bot.turns:
                await anyio.sleep(0.01)
            # Each announcement opens and closes a window: wake-ups, the same turn.
            for _ in range(3):
                await narrator.announce_trigger("once", facts=TriggerFacts("shout"))
            await anyio.sleep(0.2)
            assert bot.turns == [(1, "hero", ())]
            await narrator.end_turn("once", turn=TurnRef(1, "hero"))
            await narrator.end_turn("once", turn=TurnRef(1, "villain"))
            while len(bot.turns) < 2:
                await anyio.sleep(0.01)
            await narrator.announce_trigger("once", facts=TriggerFacts("shout"))
            await anyio.sleep(0.2)
            assert bot.turns == [(1, "hero", ()), (2, "hero", ())]
            await narrator.end_combat("once")
            await bot.ended.wait()
        assert bot.refused == Counter()


class Striker(Recorder):
    """Attacks the villain and ends its turn, once its attack has gone ahead."""

    async def on_my_turn(self, combat: CombatView, turn: Turn, combatant: Combatant) -> None:
        await super().on_my_turn(combat, turn, combatant)
        if not turn.used:
            attack = ActionSpec("attack", targets=("villain",))
            done = await self.client.declare_action(combat.id, turn=turn.ref, action=attack)
            if "action_resolved" not in [e["event"] for e in done["events"]]:
                return  # a window: the turn comes back once it is done
        await self.client.end_turn(combat.id, turn=turn.ref)


@pytest.mark.anyio
async def test_a_turn_that_waited_for_a_reaction_window_comes_back_to_the_bot(
    daemon: Daemon,
) -> None:
    secret = daemon.token("player", "--user", "ana")
    async with (
        AsyncClient.unix(daemon.socket) as narrator,
        AsyncClient.unix(daemon.socket, token=secret) as ana,
        anyio.create_task_group() as tg,
    ):
        await _duel(narrator, "resume")
        # Round 1 goes by; in round 2 the villain waits for the hero's attack.
        await narrator.end_turn("resume", turn=TurnRef(1, "hero"))
        predicate = {"actors": ["hero"], "kinds": ["attack"]}
        await narrator.reserve(
            "resume",
            turn=TurnRef(1, "villain"),
            reserved_type="standard",
            action=ActionSpec("attack", targets=("hero",)),
            trigger={"text": "the hero attacks", "predicate": predicate},
        )
        await narrator.end_turn("resume", turn=TurnRef(1, "villain"))
        bot = Striker(ana)
        tg.start_soon(bot.play, "resume")
        with anyio.fail_after(WAIT):
            while (await narrator.get_combat("resume"))["view"]["window"] is None:
                await anyio.sleep(0.01)
            now = (await narrator.get_combat("resume"))["view"]
            window = now["window"]["id"]
            await narrator.claim_reaction(
                "resume",
                window=window,
                combatant="villain",
                reservation=now["reservations"][0]["id"],
            )
            await narrator.finish_reaction("resume", window=window, combatant="villain")
            while (await narrator.get_combat("resume"))["view"]["turn"]["combatant"] == "hero":
                await anyio.sleep(0.01)
        assert bot.turns == [(2, "hero", ()), (2, "hero", ("standard",))]
        await narrator.end_combat("resume")


class Stale(Bot):
    """Sends its first answer for a turn that has passed, then the right one."""

    def __init__(self, client: AsyncClient) -> None:
        super().__init__(client)
        self.calls = 0

    async def on_my_turn(self, combat: CombatView, turn: Turn, combatant: Combatant) -> None:
        self.calls += 1
        ref = TurnRef(turn.round - 1, combatant.id) if self.calls == 1 else turn.ref
        await self.client.end_turn(combat.id, turn=ref)


@pytest.mark.anyio
async def test_a_stale_refusal_is_counted_and_the_bot_decides_again_on_the_next_view(
    daemon: Daemon,
) -> None:
    secret = daemon.token("player", "--user", "ana")
    async with (
        AsyncClient.unix(daemon.socket) as narrator,
        AsyncClient.unix(daemon.socket, token=secret) as ana,
        anyio.create_task_group() as tg,
    ):
        await _duel(narrator, "stale")
        bot = Stale(ana)
        tg.start_soon(bot.play, "stale")
        with anyio.fail_after(WAIT):
            while bot.refused["stale_turn"] == 0:
                await anyio.sleep(0.01)
            # Nothing changed, so nothing is decided until something happens.
            await anyio.sleep(0.2)
            assert bot.calls == 1
            await narrator.announce_trigger("stale", facts=TriggerFacts("shout"))
            while (await narrator.get_combat("stale"))["view"]["turn"]["combatant"] == "hero":
                await anyio.sleep(0.01)
        assert bot.calls == 2
        assert bot.refused == Counter({"stale_turn": 1})
        await narrator.end_combat("stale")


@pytest.mark.anyio
async def test_a_bot_leaves_a_delegated_window_to_the_plugin_and_finishes_the_reaction(
    daemon: Daemon,
) -> None:
    secret = daemon.token("player", "--user", "ana")
    async with (
        AsyncClient.unix(daemon.socket) as narrator,
        AsyncClient.unix(daemon.socket, token=secret) as ana,
        anyio.create_task_group() as tg,
    ):
        await narrator.create_combat(combat_id="auto", ruleset="marvel")
        await narrator.add_combatant(
            "auto",
            id="hero",
            display_name="Hero",
            controller="ana",
            player_character=True,
            tags=["auto"],
            faces=(6, 6, 6),
        )
        await narrator.add_combatant("auto", id="villain", display_name="Villain", faces=(2, 2, 2))
        await narrator.start_combat("auto")

        class Watchful(Recorder):
            offered = 0

            async def on_my_turn(self, combat: CombatView, turn: Turn, c: Combatant) -> None:
                strike = ActionSpec("attack", targets=("villain",))
                predicate = {"actors": ["villain"], "kinds": ["attack"]}
                await self.client.reserve(
                    combat.id,
                    turn=turn.ref,
                    reserved_type="standard",
                    action=strike,
                    trigger={"text": "the villain attacks", "predicate": predicate},
                )
                await self.client.end_turn(combat.id, turn=turn.ref)

            async def on_trigger(self, *args: Any) -> None:
                self.offered += 1

        bot = Watchful(ana)
        tg.start_soon(bot.play, "auto")
        with anyio.fail_after(WAIT):
            while (await narrator.get_combat("auto"))["view"]["turn"]["combatant"] != "villain":
                await anyio.sleep(0.01)
            attack = ActionSpec("attack", targets=("hero",))
            await narrator.declare_action("auto", turn=TurnRef(1, "villain"), action=attack)
            while True:
                page = await narrator.history("auto", limit=1000)
                names = [e["event"] for e in page["events"]]
                claimed_at = names.index("reaction_claimed") if "reaction_claimed" in names else 0
                if claimed_at and "action_resolved" in names[claimed_at:]:
                    break
                await anyio.sleep(0.01)
        claimed = next(e for e in page["events"] if e["event"] == "reaction_claimed")
        recorded = [e for e in page["events"] if e["event"] == "command_recorded"]
        by = {e["command"]: e["actor"] for e in recorded}
        assert claimed["claim"]["combatant"] == "hero"
        assert by["claim_reaction"]["via"] == "plugin:auto-reactions"
        assert by["finish_reaction"] == {"role": "player", "user": "ana", "via": None}
        assert bot.offered == 0
        await narrator.end_combat("auto")


DOC = Path(__file__).resolve().parents[1] / "docs" / "bots.md"


@pytest.mark.anyio
async def test_the_docs_example_bot_plays_a_players_combatant_as_written(
    daemon: Daemon, tmp_path: Path
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    source = next(b for b in blocks if "class Brawler(Bot)" in b)
    (tmp_path / "brawler.py").write_text(source)
    spec = importlib.util.spec_from_file_location("brawler", tmp_path / "brawler.py")
    assert spec is not None
    assert spec.loader is not None
    brawler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(brawler)
    secret = daemon.token("player", "--user", "ana")
    async with AsyncClient.unix(daemon.socket) as narrator, anyio.create_task_group() as tg:
        await narrator.create_combat(combat_id="doc", ruleset="marvel")
        tg.start_soon(brawler.main, str(daemon.socket), secret, "doc")
        await narrator.add_combatant(
            "doc", id="hero", display_name="Hero", controller="ana", player_character=True
        )
        await narrator.add_combatant("doc", id="thug", display_name="Thug")
        with anyio.fail_after(WAIT):
            async with narrator.subscribe("doc", after=0) as events:
                await narrator.start_combat("doc")
                attacks = 0
                async for event in events:
                    turn = event.get("event") == "turn_started"
                    if turn and event["combatant"] == "thug":
                        if event["round"] == 3:
                            await narrator.end_combat("doc")
                        else:
                            await narrator.end_turn("doc", turn=TurnRef(event["round"], "thug"))
                    if event.get("event") == "action_declared":
                        assert event["combatant"] == "hero"
                        assert event["action"]["targets"] == ["thug"]
                        attacks += 1
                    if event.get("event") == "combat_ended":
                        break
    assert attacks >= 2
