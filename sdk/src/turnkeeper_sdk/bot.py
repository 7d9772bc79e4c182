"""Bots: programs that play combatants over the protocol, as a player or the narrator would.

A :class:`Bot` plays the combatants it is given in one or many combats over an
:class:`~turnkeeper_sdk.aio.AsyncClient`. Its session decides what it may do (R16): with a
player token it plays that player's own combatants; connected as narrator it plays the
combatants it names (by default every narrator-run one). A subclass only decides; the base does
the bookkeeping::

    class Brute(Bot):
        async def on_my_turn(self, combat, turn, combatant):
            foe = next(c for c in combat.active() if c.player_character)
            attack = ActionSpec("attack", targets=(foe.id,))
            await self.client.declare_action(combat.id, turn=turn.ref, action=attack)
            await self.client.end_turn(combat.id, turn=turn.ref)


    async with AsyncClient.unix(socket, token=secret) as client:
        await Brute(client).play("c1")  # returns when the combat ends

**How it plays.** ``play(combat)`` reads the combat (``get_combat``), subscribes from that seq,
and whenever an event arrives that can give it something to do (a turn starting, a window
opening, closing or resolving, the combat ending, an undo) reads a fresh view and looks for:

- a reaction of its own that is resolving now: it finishes it (``finish_reaction``) itself;
- an open window offered to one of its combatants: :meth:`Bot.on_trigger`, which must claim or
  pass (the default passes). A combatant tagged ``auto``, or whose fitting reservation is, has
  handed its reactions to plugins (the ``auto-reactions`` plugin): the bot leaves that window
  to them, and answers itself only if it is still unanswered after :data:`DELEGATION_GRACE`;
- an open window offered to none of its combatants: :meth:`Bot.on_reaction_window` (by default
  nothing);
- its own turn, with no window open: :meth:`Bot.on_my_turn`, which should end the turn (or hold
  it). It is called again if the turn resumes in a new state: after an action of it waited for
  a reaction window, say, the turn's ``used`` has changed and the callback runs again;
- the combat's end: :meth:`Bot.on_combat_end`, and ``play`` returns.

Each of these is handled at most once (a key per turn state, window and answer): events of a
burst are read as one view, and a view seen twice does not act twice. The world is concurrent:
other players, the narrator, plugins and the daemon's clock act between the view a decision was
made from and the command it sends. The refusals that follow from that (:data:`STALE`:
``stale_turn``, ``window_closed``, ``already_answered``...) are expected: the callback that
met one stops there, the bot counts it (:attr:`Bot.refused`), reads a fresh view at once and
decides again from it if the combat has moved on (a refused command changed nothing). Other
refusals are counted and logged as warnings; only a lost connection ends ``play`` with an
error.

Callbacks receive a read-only :class:`~turnkeeper_sdk.views.CombatView` of the ``View`` the
session may see (no rule options), the engine's frozen values (``Turn``, ``Window``,
``Reservation``, ``Combatant``), and send commands with ``self.client``. A client follows a
combat once, so one bot per client plays a given combat; a bot may play several combats
concurrently, each in its own ``play`` task. Everything it keeps is bounded: one pending wake-up
and the keys of the current turn and window per combat. The library logs to the
``turnkeeper_sdk.bot`` logger and never configures logging.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import anyio

from turnkeeper_engine import BUNDLED_RULES, RuleBook, View
from turnkeeper_engine.model import Combatant, Reservation, Turn, TurnRef, Window
from turnkeeper_engine.plain import from_plain

from .aio import AsyncClient, CombatSnapshot
from .errors import CallError, ConnectionLost, TooFarBehindError
from .hookspecs import DELEGATED_TAG
from .views import CombatView

__all__ = ["DELEGATION_GRACE", "STALE", "WAKERS", "Bot"]

log = logging.getLogger(__name__)

STALE = frozenset(
    {
        "stale_turn",
        "window_open",
        "window_closed",
        "unknown_window",
        "already_answered",
        "no_reaction",
        "not_reacting",
        "not_holding",
        "unknown_reservation",
        "combatant_inactive",
        "unknown_combatant",
        "combat_ended",
        "wrong_phase",
    }
)
"""Refusals a correct bot meets in a concurrent world: the turn, window, reservation or
combatant a decision was about changed between the view and the command (another client, a
plugin, the clock or the narrator acted first). One is less obvious: ``wrong_phase``, an undo
took the combat back before its start. Nothing was applied; the next view decides again."""

WAKERS = frozenset(
    {
        "turn_started",
        "window_opened",
        "window_closed",
        "reaction_started",
        "sequence_ended",
        "combat_ended",
        "command_undone",
    }
)
"""Events after which a bot may have something to do; it reads a fresh view only for those
that may concern it. A turn or a reaction of its own starts (``turn_started``,
``reaction_started``); a window offered to one of its own opens (``window_opened``; any window
if the bot overrides :meth:`Bot.on_reaction_window`); its own turn resumes after a window
(``window_closed``, ``sequence_ended``); the combat ends, or an undo turns it back. Every
change of a bot's duties comes with one of these in the same command."""

DELEGATION_GRACE = 5.0
"""Seconds a window offered to a delegated combatant (tagged ``auto``) is left to plugins before
the bot answers it itself. Plugins answer right after the command that opened it, within their
budget (50 ms by default); one still unanswered this long has no plugin to answer it (none is
loaded, its call failed, or an undo took its answer back: plugins are not told of a window an
undo reopens), and the window would otherwise wait forever."""


class _Wake:
    """A level-triggered wake-up: any number of ``set`` calls before a ``wait`` count once."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None) -> None:
        with anyio.move_on_after(timeout):
            await self._event.wait()
        self._event = anyio.Event()


@dataclass
class _Play:
    """One combat's bookkeeping: the keys handled (or refused, with the seq of the view they
    were refused on) for the current turn and window only, when each delegated offer of the
    current window was first seen, and what the last view said about whom the bot plays (to
    tell which events may concern it)."""

    combat: str
    wake: _Wake = field(default_factory=_Wake)
    seq: int = 0
    done: set[tuple[Any, ...]] = field(default_factory=set)
    refused: dict[tuple[Any, ...], int] = field(default_factory=dict)
    delegated_since: dict[str, float] = field(default_factory=dict)
    window: str | None = None
    known: frozenset[str] = frozenset()
    mine: frozenset[str] = frozenset()
    my_turn: bool = False
    undone: bool = False

    def scope(self, turn: TurnRef | None, window: str | None) -> None:
        """Forget what belongs to turns and windows that are gone: they never come back,
        unless an undo brings them back, and then everything is decided again."""
        if self.undone:
            self.undone = False
            self.done.clear()
            self.refused.clear()
        self.done = {k for k in self.done if k[1] in (turn, window)}
        self.refused = {k: seq for k, seq in self.refused.items() if k[1] in (turn, window)}
        if window != self.window:
            self.window = window
            self.delegated_since.clear()

    def concerns(self, combatant: object) -> bool:
        """Whether an event about ``combatant`` may be about one of the bot's: one it plays,
        or one the last view did not show (a newcomer, or one just revealed)."""
        return combatant in self.mine or combatant not in self.known


def _turn_scope(turn: Turn | None) -> TurnRef | None:
    return None if turn is None else turn.ref


class Bot:
    """Plays combatants over a client; override the ``on_*`` callbacks to decide.

    ``combatants`` names the combatants to play; ``None`` plays those the session controls: a
    player's own combatants, or, connected as narrator, every narrator-run one (no controller).
    ``rules`` is the rule book its views carry (``CombatView.rules``): the rulesets it knows how
    to play; a bot for a ruleset a daemon's plugin adds passes a book that has it.
    """

    def __init__(
        self,
        client: AsyncClient,
        combatants: Collection[str] | None = None,
        *,
        rules: RuleBook = BUNDLED_RULES,
    ) -> None:
        self.client = client
        """The session the bot plays through."""
        self.rules = rules
        """The rule book the bot's views carry."""
        self.refused: Counter[str] = Counter()
        """Refusals met so far, by error code (those in :data:`STALE` and any other)."""
        self._combatants = frozenset(combatants) if combatants is not None else None

    # Callbacks ---------------------------------------------------------------------------

    async def on_my_turn(self, combat: CombatView, turn: Turn, combatant: Combatant) -> None:
        """It is ``combatant``'s turn and no window is open. Act, then end the turn (or hold
        it). Called once per state of the turn: again only if the turn resumes changed (after
        a reaction window, say). The default ends the turn."""
        await self.client.end_turn(combat.id, turn=turn.ref)

    async def on_trigger(
        self,
        combat: CombatView,
        window: Window,
        combatant: Combatant,
        reservation: Reservation | None,
    ) -> None:
        """``window`` was offered to ``combatant``: claim (``claim_reaction``) or pass
        (``pass_reaction``); the window waits for the answer. ``reservation`` is the
        combatant's reservation that fits the moment, or None when the narrator offered the
        window without one (marvel: a claim may then state its action). The default passes."""
        await self.client.pass_reaction(combat.id, window=window.id, combatant=combatant.id)

    async def on_reaction_window(self, combat: CombatView, window: Window) -> None:
        """An open window none of this bot's combatants was offered. Nobody waits for the bot
        here; in marvel any combatant may still claim, stating its action (R12). Called once per
        window; the default does nothing."""

    async def on_combat_end(self, combat: CombatView) -> None:
        """The combat has ended; ``play`` returns after this. The default does nothing."""

    # Whom it plays -------------------------------------------------------------------------

    def plays(self, combatant: Combatant) -> bool:
        """Whether this bot plays ``combatant`` now: one of its own, and active."""
        return combatant.status == "active" and self._controls(combatant)

    def _controls(self, combatant: Combatant) -> bool:
        if self._combatants is not None:
            return combatant.id in self._combatants
        session = self.client.session
        if session.get("role") == "player":
            return combatant.controller is not None and combatant.controller == session.get("user")
        return session.get("role") == "narrator" and combatant.controller is None

    # Playing -------------------------------------------------------------------------------

    async def play(self, combat: str) -> None:
        """Play ``combat`` until it ends. Raises what the client raises when the connection
        is lost for good, and ``CallError`` if the combat cannot be read (``unknown_combat``)."""
        snapshot = await self.client.get_combat(combat)
        play = _Play(combat)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow, play, snapshot["seq"])
                await self._drive(play, snapshot)
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The follower's failure is the one to report, as the client raised it.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _follow(self, play: _Play, after: int) -> None:
        """Turn the combat's events into wake-ups; nothing else is kept of them."""
        while True:
            try:
                async with self.client.subscribe(play.combat, after=after) as events:
                    async for event in events:
                        after = event["seq"]
                        if event.get("event") == "command_undone":
                            # The narrator took a command back: what was decided since the
                            # state it restores is decided again.
                            play.undone = True
                        if self._concerns(play, event):
                            play.wake.set()
                # Someone unsubscribed this client from the combat: without events the bot
                # would wait forever.
                raise ConnectionLost(f"the subscription to {play.combat} was ended")
            except TooFarBehindError:
                # The decisions read fresh views: what was missed needs no replay.
                after = (await self.client.get_combat(play.combat))["seq"]
                play.wake.set()

    def _concerns(self, play: _Play, event: dict[str, Any]) -> bool:
        """Whether ``event`` may give the bot something to do (see :data:`WAKERS`)."""
        name = event.get("event")
        if name in ("turn_started", "reaction_started"):
            return play.concerns(event.get("combatant"))
        if name == "window_opened":
            window = event.get("window")
            offered = window.get("offered", ()) if isinstance(window, dict) else ()
            watching = type(self).on_reaction_window is not Bot.on_reaction_window
            return watching or any(play.concerns(i) for i in offered)
        if name in ("window_closed", "sequence_ended"):
            return play.my_turn
        return name in WAKERS

    async def _drive(self, play: _Play, snapshot: CombatSnapshot) -> None:
        while True:
            # A newer daemon may send fields this SDK does not know: skipped, not refused.
            seen = from_plain(View, snapshot["view"], strict=False)
            combat = CombatView(seen, snapshot["seq"], self.rules)
            if combat.phase == "ended":
                await self.on_combat_end(combat)
                return
            play.seq = combat.seq
            await play.wake.wait(await self._step(play, combat))
            snapshot = await self.client.get_combat(play.combat)

    async def _step(self, play: _Play, combat: CombatView) -> float | None:
        """Do what this view asks of the bot; return how long to wait at most for the next
        event (a delegated offer's grace), or None."""
        window = combat.window
        play.scope(_turn_scope(combat.turn), window.id if window is not None else None)
        play.known = frozenset(c.id for c in combat.combatants)
        play.mine = frozenset(c.id for c in combat.combatants if self._controls(c))
        play.my_turn = combat.turn is not None and combat.turn.combatant in play.mine
        if window is not None and window.status == "resolving":
            # -1: a combatant this bot may not see is reacting (R16).
            if 0 <= window.index < len(window.sequence):
                reacting = combat.combatant(window.sequence[window.index])
                if reacting is not None and self.plays(reacting):
                    await self._once(
                        play,
                        ("finish", window.id, window.index),
                        lambda: self.client.finish_reaction(
                            combat.id, window=window.id, combatant=reacting.id
                        ),
                    )
            return None
        if window is not None:
            return await self._answer(play, combat, window)
        turn = combat.turn
        me = combat.combatant(turn.combatant) if turn is not None else None
        if turn is not None and me is not None and self.plays(me):
            key = ("turn", _turn_scope(turn), turn.used, turn.refocus)
            await self._once(play, key, lambda: self.on_my_turn(combat, turn, me))
        return None

    async def _answer(self, play: _Play, combat: CombatView, window: Window) -> float | None:
        answered = {c.combatant for c in window.claims} | set(window.passes)
        mine = [c for c in combat.order() if c.id in window.offered and self.plays(c)]
        if not mine:
            await self._once(
                play, ("window", window.id), lambda: self.on_reaction_window(combat, window)
            )
            return None
        wait: float | None = None
        now = anyio.current_time()
        offered = combat.offered(window)
        for c in mine:
            if c.id in answered:
                continue
            reservation = next((r for r in offered if r.combatant == c.id), None)
            delegated = DELEGATED_TAG in c.tags or (
                reservation is not None and DELEGATED_TAG in reservation.action.tags
            )
            if delegated:
                since = play.delegated_since.setdefault(c.id, now)
                left = since + DELEGATION_GRACE - now
                if left > 0:
                    wait = left if wait is None else min(wait, left)
                    continue
                if ("trigger", window.id, c.id) not in play.done:
                    log.warning(
                        "%s: no plugin answered window %s for %s in %g s; the bot answers",
                        play.combat,
                        window.id,
                        c.id,
                        DELEGATION_GRACE,
                    )
            await self._once(
                play,
                ("trigger", window.id, c.id),
                functools.partial(self.on_trigger, combat, window, c, reservation),
            )
        return wait

    async def _once(
        self, play: _Play, key: tuple[Any, ...], decide: Callable[[], Awaitable[Any]]
    ) -> None:
        """Run one decision unless its key was handled. A refusal changed nothing: the bot reads
        a fresh view at once and decides again if the combat moved on since the view it was
        refused on (a stale refusal says it did); refused on the very same state, it waits for
        the next event."""
        if key in play.done or play.refused.get(key, -1) >= play.seq:
            return
        play.done.add(key)
        try:
            await decide()
        except CallError as e:
            play.done.discard(key)
            play.refused[key] = play.seq
            play.wake.set()
            self.refused[e.code] += 1
            if e.code in STALE:
                log.debug("%s: %s refused as stale: %s", play.combat, key[0], e)
            else:
                log.warning("%s: %s refused: %s", play.combat, key[0], e)
