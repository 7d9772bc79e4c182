"""The one write pipeline: every command of every host takes it, written once.

    before hooks → decide (folding) → commit → publish → hooks due
                                                    ↓
                           after hooks → proposed commands → back in at the top

The daemon's hub, the plugin authors' test kit (``turnkeeper_sdk.testing.Table``) and
:class:`~turnkeeper_engine.Engine` all run their commands through :class:`Pipeline`; what differs
between them are the ports they plug in:

- a :class:`Log` per combat: its state, the writer's lock, ``commit`` (the daemon's store, or
  memory), ``publish`` (the daemon's fan-out to subscribers, or nothing) and ``due`` (where a
  committed command waits for its after hooks: the daemon's hook workers, or the test kit's
  queue);
- :class:`Hooks`, the plugins (``turnkeeper_sdk.plugins.PluginHost``), or none.

Plugins never call back into the write path: their hooks are conversations (:data:`Talk`) that
yield :class:`Proposal` values and are sent back what became of each (the :class:`Applied`, the
:class:`RefusedError`, or None when it changed nothing). The pipeline drives them, so the route
of a command is one way: pipeline → hooks → data back → pipeline → engine → log.

The engine decides each command once, with no dry run. Before hooks run only for a command the
engine accepts (an observer's ``start_combat`` makes no plugin act), so a command with before
hooks is decided ahead of them and they run on that decision; it is committed as it is unless
the hooks changed the state it was made on (their proposals committed first) or the command
itself (an initiative check's edges), or took longer than ``KEPT_FOR``. A decision made ahead
of the hooks stops at its first die (:class:`_Undrawn`): no die is rolled for a decision that
may be set aside (R2), so the commands that roll (``start_combat``, ``roll_initiative``) are
decided for good after their hooks, having passed every check the engine makes before its dice.

Written with plain ``async``/``await`` and protocols, no concurrency library, so that the engine
stays free of I/O; a host whose ports never wait (the engine's runner) drives it synchronously.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

from . import commands as cmd
from . import events as ev
from .decide import decide_folded
from .dice import DiceSource
from .errors import Arg, ProtocolError, RuleError, TemplatedError
from .model import Actor, State, maker
from .rulebook import RuleBook


class RefusedError(ProtocolError):
    """A command refused on its way through the pipeline: by the engine's rules, or by a port
    (a store that is full)."""

    def __init__(self, code: str, template: str, field: str = "", **args: Arg) -> None:
        super().__init__(code, template, field, **args)
        self.rule: RuleError | None = None
        """The engine's refusal as it gave it, when the engine refused."""

    @classmethod
    def relay(cls, error: RuleError | TemplatedError, code: str, field: str = "") -> Self:
        """Another layer's error as a refusal, with its template and arguments."""
        refused = super().relay(error, code, field)
        if isinstance(error, RuleError):
            refused.rule = error
        return refused


@dataclass(frozen=True, slots=True, eq=False)
class Applied:
    """A command that took effect: who, what, when, its events, the states it went through
    (``states[0]`` before it, ``states[i + 1]`` after ``events[i]``), its last seq, and its
    ``cause``: the host's record of what led to it (a plugin chain), None for a client's or the
    clock's command."""

    actor: Actor
    command: cmd.Command
    now: float
    events: tuple[ev.Event, ...]
    states: tuple[State, ...]
    seq: int
    cause: object = None

    @property
    def before(self) -> State:
        return self.states[0]

    @property
    def after(self) -> State:
        return self.states[-1]

    @property
    def first(self) -> int:
        """The seq of its first event."""
        return self.seq - len(self.events) + 1


@dataclass(frozen=True, slots=True)
class Proposal:
    """A command a hook wants applied, as data: by whom, and how.

    ``before_hooks``: it gets the before hooks a client's command would get (an after hook's
    proposal); a before hook's own proposals and the host's disabling of a plugin get none.
    ``instead``: it takes the place of the command whose before hooks proposed it (an initiative
    check with the plugins' edges), with that command's context; refused, the command goes
    ahead as it was sent. ``cause`` is carried into the :class:`Applied` it makes."""

    actor: Actor
    command: cmd.Command
    cause: object = None
    before_hooks: bool = False
    instead: bool = False


_applied = maker(Applied)
"""Makes an :class:`Applied` by position, without its frozen ``__init__``'s call per field:
every command that changes something is one."""

Outcome = Applied | RefusedError | None
"""What became of a proposal: applied, refused, or accepted with nothing to change."""

Talk = AsyncGenerator[Proposal, Outcome]
"""A hook conversation: yields proposals, is sent the outcome of each, in order."""


class Hooks(Protocol):
    """The plugins' side of the pipeline (``turnkeeper_sdk.plugins.PluginHost``)."""

    def before_hooks(self, command: cmd.Command) -> bool:
        """Whether any before hook stands for ``command``: if none does, it is decided and
        committed in one step."""
        ...

    def before(self, state: State, seq: int, command: cmd.Command, actor: Actor) -> Talk:
        """The before hooks of a command the engine accepted, on the state it was decided on."""
        ...

    def after(self, applied: Applied) -> Talk:
        """The hooks ``applied``'s events stand for, once it is committed."""
        ...


KEPT_FOR = 0.005
"""Seconds a decision made ahead of the before hooks stays good: its time goes into what it
records (a turn's start, a deadline), so one whose hooks took longer (a plugin may take its
whole budget) is made again with the time of its commit, as a command without hooks is."""

Q = TypeVar("Q", contravariant=True)
"""What a host attaches to one command and gets back in its ports (the daemon: the request)."""


class Log(Protocol[Q]):
    """One combat as a host keeps it."""

    @property
    def state(self) -> State: ...

    @property
    def seq(self) -> int: ...

    def writing(self) -> AbstractAsyncContextManager[object]:
        """The combat's single writer: held from a decision to its publication."""
        ...

    async def commit(self, applied: Applied, context: Q | None) -> None:
        """Make ``applied`` durable and the combat's state; raise :class:`RefusedError` to
        refuse it (nothing of it is kept)."""
        ...

    def publish(self, applied: Applied) -> None:
        """Show the committed events to whoever follows the combat."""
        ...

    def due(self, applied: Applied, context: Q | None) -> None:
        """Keep ``applied`` for its after hooks (:meth:`Pipeline.react`), in commit order."""
        ...


class MemoryLog:
    """A combat in memory: commits at once, publishes to nobody, keeps nothing due. The
    engine's runner uses it as it is; the test kit builds on it."""

    def __init__(self, state: State | None = None) -> None:
        self.state = state or State()
        self.seq = self.state.seq

    def writing(self) -> AbstractAsyncContextManager[object]:
        return nullcontext()

    async def commit(self, applied: Applied, context: object) -> None:
        self.state = applied.after
        self.seq = applied.seq

    def publish(self, applied: Applied) -> None:
        pass

    def due(self, applied: Applied, context: object) -> None:
        pass


class _FirstDie(Exception):  # noqa: N818 - a control-flow signal, not an error class
    """A decision made ahead of the before hooks reached its first die."""


class _Undrawn:
    """The dice of a decision made ahead of the before hooks: its first roll stops it, so that
    no die is rolled for a decision the hooks may set aside (R2). The command has then passed
    every check the engine makes before its dice, and is decided for good after its hooks."""

    def roll(self, sides: int) -> int:
        raise _FirstDie


@dataclass(slots=True)
class _Decision:
    """A command decided and not yet committed: its events, the states they went through
    (``states[0]`` the one it was decided on), when, and on which seq."""

    events: list[ev.Event]
    states: list[State]
    now: float
    seq: int


class Pipeline(Generic[Q]):
    """Runs commands through a combat's :class:`Log`, with ``dice``, the time from ``clock``,
    the ``rules`` the combat plays by and the plugins' ``hooks`` (None: no plugin needs any)."""

    def __init__(
        self,
        dice: DiceSource,
        clock: Callable[[], float],
        hooks: Hooks | None = None,
        *,
        rules: RuleBook,
    ) -> None:
        self.dice = dice
        self.clock = clock
        self.hooks = hooks
        self.rules = rules

    def _decide(
        self, log: Log[Q], command: cmd.Command, actor: Actor, dice: DiceSource
    ) -> _Decision:
        """The one place the engine decides: raises the refusal."""
        now = self.clock()
        decided = decide_folded(log.state, command, now, actor=actor, dice=dice, rules=self.rules)
        if isinstance(decided, RuleError):
            raise RefusedError.relay(decided, decided.code, decided.field)
        return _Decision(decided.events, decided.states, now, log.seq)

    async def run(
        self,
        log: Log[Q],
        actor: Actor,
        command: cmd.Command,
        context: Q | None = None,
        *,
        cause: object = None,
        before_hooks: bool = True,
    ) -> Applied | None:
        """One command up to its hooks being due: its before hooks (if any stand for it), the
        engine, then commit, publish, due. Returns what it applied, None when it changed
        nothing; raises :class:`RefusedError`. Its after hooks are :meth:`react`'s."""
        hooks = self.hooks if before_hooks else None
        kept: _Decision | None
        async with log.writing():
            if hooks is None or not hooks.before_hooks(command):
                decision = self._decide(log, command, actor, self.dice)
                return await self._write(log, actor, command, decision, context, cause)
            # Decided ahead of its hooks, so that they run only for a command the engine
            # accepts; kept unless they change its state or itself, or it needs the dice.
            try:
                kept = self._decide(log, command, actor, _Undrawn())
            except _FirstDie:
                kept = None
            state, seq = log.state, log.seq
        # The before hooks run with no lock held: each call may take its whole budget.
        outcome: Outcome = None
        async with aclosing(hooks.before(state, seq, command, actor)) as talk:
            while True:
                try:
                    proposal = await talk.asend(outcome)
                except StopAsyncIteration:
                    break
                kept = None  # the hooks change the state or the command
                if proposal.instead:
                    outcome = await self._instead(log, proposal, context, cause)
                    if isinstance(outcome, Applied):
                        return outcome
                else:
                    outcome = await self._proposed(log, proposal)
        async with log.writing():
            if (
                kept is None
                or kept.seq != log.seq
                or kept.states[0] is not log.state
                or self.clock() - kept.now > KEPT_FOR
            ):
                kept = self._decide(log, command, actor, self.dice)
            return await self._write(log, actor, command, kept, context, cause)

    async def _instead(
        self, log: Log[Q], proposal: Proposal, context: Q | None, cause: object
    ) -> Outcome:
        try:
            async with log.writing():
                decision = self._decide(log, proposal.command, proposal.actor, self.dice)
                return await self._write(
                    log, proposal.actor, proposal.command, decision, context, cause
                )
        except RefusedError as e:
            return e

    async def _proposed(self, log: Log[Q], proposal: Proposal) -> Outcome:
        """A proposal takes the path of any command, with no context of its own."""
        try:
            return await self.run(
                log,
                proposal.actor,
                proposal.command,
                cause=proposal.cause,
                before_hooks=proposal.before_hooks,
            )
        except RefusedError as e:
            return e

    async def _write(
        self,
        log: Log[Q],
        actor: Actor,
        command: cmd.Command,
        decision: _Decision,
        context: Q | None,
        cause: object,
    ) -> Applied | None:
        """Commit, publish, due: under the writer's lock, in commit order. The states are
        those deciding folded the events to, on the log's state (the lock has been held since,
        or the decision was checked to be made on it), so its seq is the log's: read from the
        decision, as a log's ``seq`` may be a property, a call."""
        if not decision.events:
            return None
        applied = _applied(
            actor,
            command,
            decision.now,
            tuple(decision.events),
            tuple(decision.states),
            decision.seq + len(decision.events),
            cause,
        )
        await log.commit(applied, context)
        log.publish(applied)
        if self.hooks is not None:
            log.due(applied, context)
        return applied

    async def react(self, log: Log[Q], applied: Applied) -> None:
        """``applied``'s after hooks, and what they propose, each through :meth:`run`: the
        hooks of those are due in turn, after those committed before them."""
        if self.hooks is None:
            return
        outcome: Outcome = None
        async with aclosing(self.hooks.after(applied)) as talk:
            while True:
                try:
                    proposal = await talk.asend(outcome)
                except StopAsyncIteration:
                    return
                outcome = await self._proposed(log, proposal)


T = TypeVar("T")


def at_once(step: Coroutine[Any, Any, T]) -> T:
    """The result of a pipeline step whose ports never wait (a :class:`MemoryLog`'s, with no
    hooks or none called), without an event loop."""
    try:
        step.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    step.close()
    raise RuntimeError("a port waited: run this step on an event loop")
