"""The plugin host: loads plugins, calls each hook implementation on its own, and turns what
plugins propose into commands.

A typed facade over pluggy (core code never touches ``pm.hook``). It is the ``hooks`` port of the
write pipeline (:mod:`turnkeeper_engine.pipeline`) in the daemon and in the in-process test kit
(:mod:`turnkeeper_sdk.testing`) alike, so a plugin behaves the same under test as in production.
Its hooks are data functions in the shape of conversations: :meth:`PluginHost.before` and
:meth:`PluginHost.after` yield the commands plugins propose (and the disabling of plugins that
fail) and are sent back what became of each; the host never applies a command itself.

pluggy stops at the first implementation that raises, so the host calls implementations one by
one: each with its own time budget and error handling. A failure is reported with the plugin's
name and counted; ``max_failures`` failures in a row of one hook in one combat disable the plugin
for that combat (a ``disable_plugin`` command, so the combat's log says so and it survives a
restart).

No plugin code runs on the caller's event loop: each plugin has a thread of its own
(:class:`_Runner`), where its hooks run one at a time, async ones on that thread's own event loop.
The thread and its loop last from the plugin's first call until :meth:`PluginHost.stop` (or until
the host is dropped), so whatever a hook ties to its loop or its thread (a session, an
``asyncio.Lock``, a sqlite3 connection) serves its later calls too. The caller waits for a call at
most its budget (and ``ABANDON_GRACE``); a call still running then is given up on and left to finish
in its thread, and the plugin is not called again until it has. Python cannot kill a thread: a hook
that never returns keeps its thread (and, in a busy loop, a share of the CPU) until the process
ends, which is why the threads are daemon threads: they never hold up the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import inspect
import itertools
import logging
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import Any

import anyio
import anyio.lowlevel
import pluggy
from anyio.lowlevel import EventLoopToken

from turnkeeper_engine import (
    BUNDLED_RULES,
    Actor,
    ConditionType,
    NameTakenError,
    RuleBook,
    Ruleset,
    State,
)
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine.model import Role
from turnkeeper_engine.pipeline import Applied, Outcome, Proposal, RefusedError, Talk
from turnkeeper_engine.plain import PlainError, command_from_plain, command_to_plain

from . import hookspecs
from .hookspecs import DELEGATED_TAG, HOOKS, PROJECT, REGISTRATION_HOOKS, CheckAdjustment
from .views import CombatView

ENTRY_POINT_GROUP = "turnkeeper.plugins"
"""Where installed distributions name their plugins; the bundled ones use it too."""

DEFAULT_BUDGET = 0.05
"""Seconds one hook implementation may take. Hooks run between a command's commit and the
next command of the same combat's plugins: a slow plugin delays every plugin after it."""

MAX_FAILURES = 3
"""Failures in a row of one hook, in one combat, after which a plugin is disabled for that
combat: one failure may be a fluke of a busy machine; three in a row is a broken plugin. Counted
per hook, so a plugin whose every ``on_turn_start`` fails is disabled even if its other hooks
succeed in between."""

MAX_PROPOSALS = 32
"""Commands one hook call may propose; the rest are dropped and reported, so a runaway plugin
cannot flood a combat's log."""

MAX_CHAIN = 8
"""How deep plugin commands may cause further plugin commands (a plugin reacting to its own
events). Past it the chain is cut and reported: two plugins answering each other forever would
otherwise never stop."""

ABANDON_GRACE = 0.05
"""How long past its budget the host still waits for a call before giving up on it: an async
hook cancelled at its budget gets this long to stop, and scheduling noise on a busy machine
stays below it."""

STUCK = 1.0
"""Seconds a call given up on may have run before its plugin counts as stuck. Until then a
caller waits for the plugin's thread (at most its own budget): on a busy machine a call a
little late is a hiccup, and failing the calls of other combats for it would disable a sound
plugin there. Past it, calls fail at once: a stuck plugin costs nobody any waiting."""

PLUGIN_ROLE: Role = "narrator"
"""Plugins are installed by the daemon's operator and run in its process; their commands pass
the narrator's validation (R16) and are recorded as ``plugin:<name>``."""

MAX_CAUSED = 64
"""Commands plugins may cause, all levels together, from one command of a client or the clock:
a chain is also cut by its breadth, not only its depth (32 proposals a level would otherwise
make millions)."""

MAX_NAME = 128
"""Longest plugin name: it goes into commands (``plugin:<name>``, ``disable_plugin``), which
the engine bounds at 128 characters."""
NAME = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_NAME}}}")

CHAINS = "command chains"
"""What a plugin's failures to stay within ``MAX_CAUSED`` are counted under, beside its hooks."""

MAX_REASON = 500
"""Longest reason a ``disable_plugin`` the host sends gives (the error that disabled the
plugin, cut): the daemon's log has it whole."""

HOST_ACTOR = Actor("narrator", None, "daemon")
"""Who disables a failing plugin."""

log = logging.getLogger("turnkeeper_sdk.plugins")


def plugin_actor(name: str) -> Actor:
    """The actor a plugin's commands are recorded with."""
    return Actor(PLUGIN_ROLE, None, f"plugin:{name}")


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A loaded plugin: its name, version, the hooks it implements and what it registered."""

    name: str
    version: str
    hooks: tuple[str, ...]
    provides: tuple[str, ...] = ()
    unknown_hooks: tuple[str, ...] = ()
    """Functions that look like hooks but are not: misspelled names, or a hook without the
    ``hookimpl`` marker. Each entry says what it probably meant."""


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A plugin that did not load, and why."""

    name: str
    error: str


@dataclass(slots=True)
class PluginStats:
    """What happened to one plugin's calls since the host started. ``blocked`` counts calls
    given up on while still running at their budget, and calls not made because one was."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    blocked: int = 0
    refused: int = 0
    disabled: int = 0


_BEFORE: Mapping[type[cmd.Command], tuple[str, ...]] = {
    cmd.RollInitiative: ("before_initiative_check",),
    cmd.StartCombat: ("before_combat_start", "before_initiative_check"),
    cmd.DeclareAction: ("before_action_declared",),
}
"""The hooks that come before each command that has any."""

_AFTER: Mapping[type[ev.Event], tuple[str, ...]] = {
    ev.CombatStarted: ("on_combat_start",),
    ev.CombatEnded: ("on_combat_end",),
    ev.InitiativeRolled: ("on_initiative_check",),
    ev.RoundStarted: ("on_round_start",),
    ev.RoundEnded: ("on_round_end",),
    ev.TurnStarted: ("on_turn_start",),
    ev.TurnEnded: ("on_turn_end",),
    ev.ActionDeclared: ("on_action_declared",),
    ev.WindowOpened: ("on_window_open", "on_trigger"),
    ev.WindowClosed: ("on_window_close",),
    ev.ConditionApplied: ("on_condition_applied",),
    ev.ConditionExpired: ("on_condition_expired",),
}
"""The hooks each event may stand for once committed (``_hook_calls`` says when it does)."""


@dataclass(slots=True)
class _Chain:
    """Commands plugins caused so far from one command of a client or the clock, all levels
    together (``MAX_CAUSED``); ``root`` is the seq that command ended at."""

    root: int
    caused: int = 0


@dataclass(frozen=True, slots=True)
class _Cause:
    """What led to a plugin's command: how deep in its chain it is, and the chain. Carried by
    the pipeline from a proposal into the ``Applied`` it makes, so it lives exactly as long as
    the commands whose hooks are still due."""

    depth: int
    chain: _Chain


Report = Callable[..., None]
"""``report(what, plugin=..., **details)``: how problems reach the host's log."""


def _log_report(what: str, **details: Any) -> None:
    log.warning("%s %s", what, details)


def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.75)
    return f"{name} (did you mean {close[0]}?)" if close else name


@dataclass(slots=True)
class _Outcome:
    plugin: str
    value: Any


@dataclass(frozen=True, slots=True)
class HeldCall:
    """A hook call a plugin's thread is running: whose, which hook, in which combat, and since
    when (``time.monotonic()``)."""

    plugin: str
    hook: str
    combat: str
    since: float


@dataclass(slots=True, eq=False)
class _Job:
    """One hook call handed to a plugin's thread, and what came of it (written by the thread
    before it wakes the caller)."""

    function: Callable[..., Any]
    args: Mapping[str, Any]
    budget: float
    token: EventLoopToken
    """The caller's event loop, to wake it from the plugin's thread."""
    done: anyio.Event
    value: Any = None
    problem: str | None = None
    cancelled: bool = False
    started: float | None = None
    """When the thread began the call (``time.monotonic()``): the budget is the plugin's own
    time, not the time its thread took to be scheduled."""
    elapsed: float = 0.0
    finished: bool = False


async def _within(awaitable: Awaitable[Any], budget: float) -> tuple[Any, bool]:
    """An async hook's result within its budget, and whether the budget ran out."""
    with anyio.move_on_after(budget):
        return await awaitable, False
    return None, True


def _wake(token: EventLoopToken, event: anyio.Event) -> None:
    """Set ``event`` on its own event loop, from a plugin's thread."""
    try:
        token.backend_class.run_sync_soon(event.set, (), token.native_token)
    except Exception:  # that event loop has ended: nobody waits any more
        log.debug("plugin_result_unclaimed")


class _Runner:
    """One plugin's thread and its event loop, both kept from the plugin's first call until
    the host stops: its hook calls run there one at a time, never on the caller's event loop,
    so no hook can hold the loop, whatever it does. A synchronous hook runs in the thread (a
    callback of its loop), an async one as a task of its loop; what a hook leaves on the loop
    (a session, a lock, a task it started) is there, and runs, between calls, as it did when
    hooks ran on the daemon's own loop.

    ``busy`` names the call under way: set by the caller as it hands a call over, cleared by
    the thread once the call has returned. A call the caller gave up on keeps it set, so the
    plugin is not called again (and no second call is queued behind it) until that call
    ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.busy: HeldCall | None = None
        self._guard = threading.Lock()
        self._idle: list[tuple[EventLoopToken, anyio.Event]] = []
        """Callers waiting for ``busy`` to clear: at most one per event loop (a plugin's
        callers take turns), each gone once it stops waiting."""
        self._loop = asyncio.new_event_loop()
        """Made once, run by the thread only and closed by it when it ends: a call never meets
        a loop other than the one its plugin's earlier calls ran on."""
        self._task: asyncio.Task[None] | None = None
        """The async call under way, held so that the loop does not lose it."""
        self._closing = False
        # A daemon thread: one stuck in a hook must not keep the process from exiting.
        threading.Thread(
            target=self._serve, name=f"turnkeeper-plugin-{self.name}", daemon=True
        ).start()

    def start(self, job: _Job, held: HeldCall) -> None:
        """Hand a call over. The caller checked that ``busy`` is clear: at most one call is
        ever waiting or running."""
        self.busy = held
        self._loop.call_soon_threadsafe(self._begin, job)

    def close(self) -> None:
        """Let the thread end once the call under way, if any, has returned."""
        self._closing = True
        with contextlib.suppress(RuntimeError):  # its loop is closed already
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            while not self._closing:
                try:
                    loop.run_forever()
                except BaseException as e:  # a task of the plugin's own raised SystemExit, say
                    # No traceback: Python 3.11 formats one with ast.parse, which is not safe
                    # beside the daemon's thread doing the same.
                    log.warning("plugin_task_failed %s %s: %s", self.name, type(e).__name__, e)
            # What the plugin left running ends as at the close of any loop: cancelled.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=ABANDON_GRACE))
        except BaseException as e:  # the plugin's own tasks may raise anything as they end
            log.debug("plugin_loop_closing_failed %s %s: %s", self.name, type(e).__name__, e)
        finally:
            loop.close()

    def release_waiters(self) -> None:
        """End every wait in ``idle`` now (the host is stopping)."""
        with self._guard:
            waiting, self._idle = self._idle, []
        for token, event in waiting:
            _wake(token, event)

    async def idle(self, token: EventLoopToken, timeout: float) -> bool:
        """Wait at most ``timeout`` for the call under way to end: whether it did."""
        event = anyio.Event()
        waiter = (token, event)
        with self._guard:
            if self.busy is None:
                return True
            self._idle.append(waiter)
        try:
            with anyio.move_on_after(timeout):
                await event.wait()
        finally:
            with self._guard, contextlib.suppress(ValueError):
                self._idle.remove(waiter)
        return self.busy is None

    def _begin(self, job: _Job) -> None:
        job.started = time.monotonic()
        try:
            value = job.function(**job.args)
        except BaseException as e:  # a plugin's failure is its own, whatever it raises
            self._end(job, None, e)
            return
        if inspect.isawaitable(value):
            self._task = self._loop.create_task(self._finish(job, value))
        else:
            self._end(job, value, None)

    async def _finish(self, job: _Job, awaitable: Awaitable[Any]) -> None:
        try:
            value, job.cancelled = await _within(awaitable, job.budget)
        except BaseException as e:  # as in ``_begin``
            self._end(job, None, e)
            return
        self._end(job, value, None)

    def _end(self, job: _Job, value: Any, error: BaseException | None) -> None:
        if error is None and not job.cancelled:
            try:
                if not isinstance(value, cmd.Command | CheckAdjustment | None):
                    # A generator runs only when consumed: consume it here, within the budget
                    # and the error handling, and never more of it than could be used.
                    value = list(itertools.islice(iter(value), MAX_PROPOSALS + 1))
            except BaseException as e:  # as in ``_begin``
                error = e
        if error is not None:
            job.problem = f"{type(error).__name__}: {error}"
        else:
            job.value = value
        assert job.started is not None  # set as the call began
        job.elapsed = time.monotonic() - job.started
        job.finished = True
        self._task = None
        self.busy = None
        _wake(job.token, job.done)
        self.release_waiters()


def _close_all(runners: Mapping[str, _Runner]) -> None:
    for runner in list(runners.values()):
        runner.close()


@dataclass
class PluginHost:
    """Plugins of one daemon (or one test): loading, isolated calls, proposals."""

    budget: float = DEFAULT_BUDGET
    max_failures: int = MAX_FAILURES
    allow: frozenset[str] | None = None
    """If set, only these entry points are loaded."""
    block: frozenset[str] = frozenset()
    report: Report = _log_report
    rules: RuleBook = BUNDLED_RULES
    """The rule book: the one the host is given, extended by the rulesets and condition types
    each plugin contributes as it loads. Whoever runs the engine with these plugins passes it
    on (to ``decide``, the views, narration)."""
    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    failures: list[LoadFailure] = field(default_factory=list)
    skipped: list[LoadFailure] = field(default_factory=list)
    stats: dict[str, PluginStats] = field(default_factory=dict)
    per_command: bool = field(default=False, init=False)
    """Whether a loaded plugin implements a hook called per command: if none does, a host
    skips the hooks' bookkeeping altogether."""
    _manager: pluggy.PluginManager = field(init=False)
    _streak: dict[tuple[str, str, str], tuple[int, str]] = field(default_factory=dict, init=False)
    """(combat, plugin, hook) → failures in a row of that hook, and the last one's reason."""
    _due_off: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    """(combat, plugin) → why: plugins that reached ``max_failures`` there and are not called
    there any more, until ``failing`` hands them over to be disabled."""
    _before_types: set[type[cmd.Command]] = field(default_factory=set, init=False)
    """Commands a loaded plugin has a before hook for."""
    _after_types: set[type[ev.Event]] = field(default_factory=set, init=False)
    """Events a loaded plugin has a hook for, once committed."""
    _off: dict[str, set[str]] = field(default_factory=dict, init=False)
    """Plugins this host disabled, by combat (see ``call``)."""
    in_progress: dict[int, tuple[str, str, str, float]] = field(default_factory=dict, init=False)
    """Hook calls under way: (plugin, hook, combat, ``time.monotonic()`` at the start). Read by
    a watchdog thread when the event loop stops answering, to say which plugin holds it."""
    _calls: Iterator[int] = field(default_factory=itertools.count, init=False)
    _runners: dict[str, _Runner] = field(default_factory=dict, init=False)
    _locks: dict[str, anyio.Lock] = field(default_factory=dict, init=False)
    """One per plugin, so that callers take turns at its thread; made anew for each event loop
    the host is called from (a test kit's table runs one loop per step)."""
    _locks_loop: object = field(default=None, init=False)
    _waiting: set[_Job] = field(default_factory=set, init=False)
    """Calls a caller is waiting for, so that ``stop`` can end the waits."""
    stopped: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._manager = pluggy.PluginManager(PROJECT)
        self._manager.add_hookspecs(hookspecs)
        # Hosts come and go in tests without being stopped: their plugins' threads end with
        # them rather than pile up. The finalizer holds the runners, never the host.
        weakref.finalize(self, _close_all, self._runners)

    # ------------------------------------------------------------------------------ loading

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Load every installed plugin allowed by the allow and block lists. One that fails to
        import or to register is named in ``failures`` and skipped; the rest still load."""
        for point in sorted(entry_points(group=group), key=lambda p: p.name):
            if point.name in self.plugins:
                continue
            if self.allow is not None and point.name not in self.allow:
                self.skipped.append(LoadFailure(point.name, "not in the allow list"))
                continue
            if point.name in self.block:
                self.skipped.append(LoadFailure(point.name, "in the block list"))
                continue
            try:
                plugin = point.load()
            except Exception as e:  # a broken plugin is named and skipped
                self.fail(point.name, f"import failed: {type(e).__name__}: {e}")
                continue
            version = point.dist.version if point.dist is not None else ""
            self.register(plugin, point.name, version)

    def register(self, plugin: object, name: str, version: str = "") -> PluginInfo | None:
        """Register one plugin object (a module, a class instance) under ``name``."""
        if not NAME.fullmatch(name):
            self.fail(name, f"a plugin name is 1 to {MAX_NAME} letters, digits, '_', '-', '.'")
            return None
        try:
            self._manager.register(plugin, name)
        except Exception as e:  # pluggy refuses bad signatures: named and skipped
            self.fail(name, f"{type(e).__name__}: {e}")
            return None
        try:
            wrappers = [
                impl.function.__name__
                for hook in HOOKS
                for impl in getattr(self._manager.hook, hook).get_hookimpls()
                if impl.plugin_name == name and (impl.hookwrapper or impl.wrapper)
            ]
            if wrappers:
                # The host calls implementations one by one: there is no call to wrap.
                raise TypeError(f"hook wrappers are not supported: {', '.join(wrappers)}")
            hooks = tuple(h for h in HOOKS if self._implements(name, h))
            unknown = self._unknown_hooks(plugin)
            provides = self._register_types(name)
        except Exception as e:  # whatever the plugin object does, it is named and skipped
            self._manager.unregister(name=name)
            self.fail(name, f"{type(e).__name__}: {e}")
            return None
        if unknown:
            self.report("plugin_unknown_hooks", plugin=name, hooks=list(unknown))
        info = PluginInfo(name, version, hooks, provides, unknown)
        self.plugins[name] = info
        self.per_command = self.per_command or bool(set(hooks) - REGISTRATION_HOOKS)
        self._before_types.update(t for t, names in _BEFORE.items() if set(names) & set(hooks))
        self._after_types.update(t for t, names in _AFTER.items() if set(names) & set(hooks))
        self.stats.setdefault(name, PluginStats())
        return info

    def fail(self, name: str, error: str) -> None:
        """Record a plugin that did not load, and why (a host loading plugins its own way)."""
        self.failures.append(LoadFailure(name, error))
        self.report("plugin_load_failed", plugin=name, error=error)

    def _implements(self, name: str, hook: str) -> bool:
        caller = getattr(self._manager.hook, hook)
        return any(impl.plugin_name == name for impl in caller.get_hookimpls())

    @staticmethod
    def _unknown_hooks(plugin: object) -> tuple[str, ...]:
        found = []
        marker = f"{PROJECT}_impl"
        for attr in dir(plugin):
            if attr.startswith("_"):
                continue
            # Static lookup: a plugin's properties and __getattr__ are not run at load.
            value = inspect.getattr_static(plugin, attr, None)
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            if not inspect.isfunction(value):
                continue
            opts = getattr(value, marker, None)
            if isinstance(opts, dict) and opts.get("specname"):
                continue
            marked = hasattr(value, marker)
            if marked and attr not in HOOKS:
                found.append(_suggest(attr))
            elif not marked and attr in HOOKS:
                found.append(f"{attr} (not marked with @hookimpl)")
            elif not marked and _suggest(attr) != attr:
                found.append(_suggest(attr))
        return tuple(found)

    def _register_types(self, name: str) -> tuple[str, ...]:
        """Rulesets and condition types come once, at load, into ``rules``; a name the book
        gives to another item already is never replaced."""
        provides: list[str] = []
        for hook in ("turnkeeper_rulesets", "turnkeeper_condition_types"):
            for impl in getattr(self._manager.hook, hook).get_hookimpls():
                if impl.plugin_name != name:
                    continue
                try:
                    items = list(impl.function() or ())
                except Exception as e:  # a broken registration hook is reported, not fatal
                    self.report("plugin_failed", plugin=name, hook=hook, error=repr(e))
                    continue
                for item in items:
                    if not isinstance(item, Ruleset | ConditionType):
                        self.report("plugin_bad_registration", plugin=name, item=repr(item))
                        continue
                    kind = "ruleset" if isinstance(item, Ruleset) else "condition"
                    try:
                        self.rules = (
                            self.rules.with_rulesets((item,))
                            if isinstance(item, Ruleset)
                            else self.rules.with_condition_types((item,))
                        )
                    except NameTakenError:
                        self.report("plugin_name_taken", plugin=name, what=f"{kind}:{item.name}")
                        continue
                    provides.append(f"{kind}:{item.name}")
        return tuple(provides)

    def listing(self) -> dict[str, Any]:
        """What loaded (with counters), what failed and what was skipped, as plain data."""
        return {
            "loaded": [
                {
                    "name": p.name,
                    "version": p.version,
                    "hooks": list(p.hooks),
                    "provides": list(p.provides),
                    "unknown_hooks": list(p.unknown_hooks),
                    **dataclasses.asdict(self.stats[p.name]),
                }
                for p in self.plugins.values()
            ],
            "failed": [{"name": f.name, "error": f.error} for f in self.failures],
            "skipped": [{"name": f.name, "reason": f.error} for f in self.skipped],
        }

    # ------------------------------------------------------------------------------ calling

    async def call(
        self, hook: str, combat_id: str, disabled: Iterable[str], **kwargs: Any
    ) -> list[_Outcome]:
        """Call every implementation of ``hook`` not disabled for the combat, each alone and
        within the budget; return what each returned that did not fail."""
        outcomes: list[_Outcome] = []
        if self.stopped:
            return outcomes
        # Hooks due for commands committed before a plugin was disabled still run after it:
        # the host's own record of what it disabled holds for them too.
        off = set(disabled) | self._off.get(combat_id, set())
        # pluggy's own call order (last registered first, tryfirst/trylast honoured).
        for impl in reversed(getattr(self._manager.hook, hook).get_hookimpls()):
            # One that just failed too often is not called again, even before its disabling
            # commits (a start_combat's check for each of 500 combatants, say).
            if impl.plugin_name in off or (combat_id, impl.plugin_name) in self._due_off:
                continue
            args = {name: kwargs[name] for name in impl.argnames}
            ok, value = await self._call_one(impl.plugin_name, hook, combat_id, impl.function, args)
            if ok:
                outcomes.append(_Outcome(impl.plugin_name, value))
        return outcomes

    async def _call_one(
        self,
        plugin: str,
        hook: str,
        combat_id: str,
        function: Callable[..., Any],
        args: Mapping[str, Any],
    ) -> tuple[bool, Any]:
        stats = self.stats.setdefault(plugin, PluginStats())
        stats.calls += 1
        call = next(self._calls)
        self.in_progress[call] = (plugin, hook, combat_id, time.monotonic())
        try:
            token = anyio.lowlevel.current_token()
            async with self._lock(plugin, token):
                problem, value = await self._handed(plugin, hook, combat_id, function, args, token)
        finally:
            del self.in_progress[call]
        if self.stopped:
            # Not the plugin's failure: the daemon stopped waiting for it.
            return False, None
        if problem is None:
            self._streak.pop((combat_id, plugin, hook), None)
            return True, value
        self.report("plugin_failed", plugin=plugin, hook=hook, combat=combat_id, error=problem)
        self._fail(combat_id, plugin, hook, problem)
        return False, None

    def _lock(self, plugin: str, token: EventLoopToken) -> anyio.Lock:
        if token.native_token is not self._locks_loop:
            self._locks = {}
            self._locks_loop = token.native_token
        lock = self._locks.get(plugin)
        if lock is None:
            lock = self._locks[plugin] = anyio.Lock()
        return lock

    async def _handed(
        self,
        plugin: str,
        hook: str,
        combat_id: str,
        function: Callable[..., Any],
        args: Mapping[str, Any],
        token: EventLoopToken,
    ) -> tuple[str | None, Any]:
        """One call in the plugin's thread, waited for at most its budget and the grace:
        (the problem, if any; what it returned)."""
        stats = self.stats[plugin]
        runner = self._runners.get(plugin)
        if runner is None:
            runner = self._runners[plugin] = _Runner(plugin)
        # Only a call given up on can still be running here: a late one is waited for a
        # little, a stuck one not at all.
        held = runner.busy
        if held is not None and time.monotonic() - held.since < STUCK and not self.stopped:
            await runner.idle(token, self.budget)
            held = runner.busy
        if held is not None:
            stats.blocked += 1
            late = time.monotonic() - held.since
            return (
                f"not called: {held.hook} in {held.combat} still running after {late:.1f} s",
                None,
            )
        if self.stopped:
            return "not called: stopping", None
        job = _Job(function, args, self.budget, token, anyio.Event())
        handed = time.monotonic()
        runner.start(job, HeldCall(plugin, hook, combat_id, handed))
        self._waiting.add(job)
        wait = self.budget + ABANDON_GRACE
        try:
            while not job.done.is_set():
                # From when the thread began the call; a thread slow to be scheduled is
                # forgiven up to one more wait.
                began = job.started if job.started is not None else handed
                remaining = min(began, handed + wait) + wait - time.monotonic()
                if remaining <= 0:
                    break
                with anyio.move_on_after(remaining):
                    await job.done.wait()
        finally:
            self._waiting.discard(job)
        budget_ms = round(self.budget * 1000)
        if not job.finished:
            # Cancellation cannot reach a synchronous hook, and an async one can ignore it: the
            # call is left to finish in its thread, its result unused.
            stats.blocked += 1
            return f"still running at its {budget_ms} ms budget: given up on", None
        if job.problem is not None:
            stats.errors += 1
            return job.problem, None
        if job.cancelled:
            stats.timeouts += 1
            return f"timeout after {budget_ms} ms", None
        if job.elapsed > self.budget:
            stats.timeouts += 1
            return f"took {round(job.elapsed * 1000)} ms, over its {budget_ms} ms budget", None
        return None, job.value

    def stop(self) -> None:
        """Stop calling plugins, for a daemon that must exit whatever they do: every call
        waited for is given up on at once, and no other is made; each plugin's thread ends
        once its call under way, if any, returns. Call it from the event loop the calls wait
        on."""
        self.stopped = True
        for job in list(self._waiting):
            job.done.set()
        for runner in list(self._runners.values()):
            runner.release_waiters()
        _close_all(self._runners)

    def held(self) -> list[HeldCall]:
        """The hook calls plugins' threads are running, those given up on included. Safe to
        call from another thread (a watchdog's)."""
        try:
            runners = list(self._runners.values())
        except RuntimeError:  # changed while copied: the caller looks again soon
            return []
        return [busy for r in runners if (busy := r.busy) is not None]

    def _fail(self, combat_id: str, plugin: str, hook: str, problem: str) -> None:
        key = (combat_id, plugin, hook)
        count = self._streak.get(key, (0, ""))[0] + 1
        self._streak[key] = (count, problem)
        if count >= self.max_failures:
            reason = f"{count} failures in a row of {hook}: {problem}"
            self._due_off.setdefault((combat_id, plugin), reason)

    def failing(self, combat_id: str) -> list[tuple[str, str]]:
        """Plugins one of whose hooks reached ``max_failures`` in a row in this combat, with the
        reason; their streaks start over (a narrator may enable the plugin again)."""
        found = [(p, why) for (c, p), why in self._due_off.items() if c == combat_id]
        for plugin, _ in found:
            del self._due_off[(combat_id, plugin)]
        plugins = {p for p, _ in found}
        for key in [k for k in self._streak if k[0] == combat_id and k[1] in plugins]:
            del self._streak[key]
        return found

    def forget(self, combat_id: str) -> None:
        """Drop the failure streaks of a combat that ended."""
        for key in [k for k in self._streak if k[0] == combat_id]:
            del self._streak[key]
        for due in [k for k in self._due_off if k[0] == combat_id]:
            del self._due_off[due]
        self._off.pop(combat_id, None)

    # ------------------------------------------------------------------------- before hooks

    async def adjustment(
        self, combat: CombatView, combatant_id: str
    ) -> tuple[CheckAdjustment, str] | None:
        """Edges and troubles every plugin adds to a check, summed, and who added them."""
        combatant = combat.combatant(combatant_id)
        if combatant is None:
            return None
        outcomes = await self.call(
            "before_initiative_check",
            combat.id,
            combat.state.disabled_plugins,
            combat=combat,
            combatant=combatant,
        )
        edges = troubles = 0
        names, reasons = [], []
        for o in outcomes:
            if isinstance(o.value, CheckAdjustment) and (o.value.edges or o.value.troubles):
                edges += o.value.edges
                troubles += o.value.troubles
                names.append(o.plugin)
                reasons.append(o.value.reason)
        if not names:
            return None
        return CheckAdjustment(edges, troubles, "; ".join(r for r in reasons if r)), "+".join(names)

    async def before_start(self, combat: CombatView) -> list[tuple[str, cmd.Command]]:
        """Commands plugins want applied just before ``start_combat`` (surprise, R8)."""
        outcomes = await self.call(
            "before_combat_start", combat.id, combat.state.disabled_plugins, combat=combat
        )
        return self._commands(outcomes, "before_combat_start", combat.id)

    def before_hooks(self, command: cmd.Command) -> bool:
        """Whether a loaded plugin implements a hook that comes before ``command``."""
        return type(command) in self._before_types

    async def before(self, state: State, seq: int, command: cmd.Command, actor: Actor) -> Talk:
        """The hooks that come before a command the engine accepted, as a conversation with the
        pipeline: ``before_combat_start`` (its commands are applied first) and
        ``before_initiative_check`` (its edges and troubles go into the check, in place of the
        command as sent)."""
        combat = CombatView(state, seq, self.rules)
        if isinstance(command, cmd.RollInitiative):
            found = await self.adjustment(combat, command.combatant)
            if found is None:
                return
            adjust, names = found
            adjusted = replace(
                command,
                edges=command.edges + adjust.edges,
                troubles=command.troubles + adjust.troubles,
            )
            checked = self._checked(names, adjusted, combat.id)
            if checked is None:
                return
            outcome = yield Proposal(actor, checked, instead=True)
            if isinstance(outcome, RefusedError):
                # The plugins' adjustment must not cost the client its roll: the pipeline goes
                # on with the check as sent.
                self._refused(names, adjusted, combat.id, outcome)
            return
        if isinstance(command, cmd.DeclareAction):
            proposed = await self._before_declared(combat, command)
        else:
            proposed = await self.before_start(combat)
        for plugin, wanted in proposed:
            checked = self._checked(plugin, wanted, combat.id)
            if checked is not None:
                outcome = yield Proposal(plugin_actor(plugin), checked)
                self._settled(plugin, wanted, combat.id, outcome)
                if isinstance(outcome, Applied):
                    combat = CombatView(outcome.after, outcome.seq, self.rules)
        if isinstance(command, cmd.StartCombat):
            groups: set[str] = set()
            for c in combat.active():
                if c.check is not None or (c.group is not None and c.group in groups):
                    continue
                if c.group is not None:
                    groups.add(c.group)
                found = await self.adjustment(combat, c.id)
                if found is not None:
                    adjust, names = found
                    roll = cmd.RollInitiative(c.id, edges=adjust.edges, troubles=adjust.troubles)
                    checked = self._checked(names, roll, combat.id)
                    if checked is None:
                        continue
                    outcome = yield Proposal(plugin_actor(names), checked)
                    self._settled(names, roll, combat.id, outcome)
                    if isinstance(outcome, Applied):
                        combat = CombatView(outcome.after, outcome.seq, self.rules)
        for plugin, reason, disabling in self._disabling(combat.id):
            outcome = yield disabling
            self._disabled(plugin, combat.id, reason, outcome)

    async def _before_declared(
        self, combat: CombatView, command: cmd.DeclareAction
    ) -> list[tuple[str, cmd.Command]]:
        """Commands plugins want applied just before an action is declared (surprise, R8)."""
        combatant = combat.combatant(command.turn.combatant)
        if combatant is None:
            return []
        outcomes = await self.call(
            "before_action_declared",
            combat.id,
            combat.state.disabled_plugins,
            combat=combat,
            combatant=combatant,
            action=command.action,
        )
        return self._commands(outcomes, "before_action_declared", combat.id)

    def _checked(self, plugin: str, command: cmd.Command, combat_id: str) -> cmd.Command | None:
        """A proposal checked as the wire checks a client's command: a plugin's is a Python
        object, and the same decoding checks it, so nothing the log could not replay is ever
        recorded. None (and reported) when it fails."""
        try:
            return command_from_plain(command_to_plain(command))
        except PlainError as e:
            refused = RefusedError.relay(e, "invalid_params", e.field)
        except Exception as e:  # a malformed proposal is the plugin's failure
            refused = RefusedError("invalid_params", "{reason}", reason=f"{type(e).__name__}: {e}")
        self._refused(plugin, command, combat_id, refused)
        return None

    def _settled(self, plugin: str, command: cmd.Command, combat_id: str, outcome: Outcome) -> None:
        if isinstance(outcome, RefusedError):
            self._refused(plugin, command, combat_id, outcome)

    def _refused(
        self, plugin: str, command: cmd.Command, combat_id: str, why: RefusedError
    ) -> None:
        for name in plugin.split("+"):
            if name in self.stats:
                self.stats[name].refused += 1
        self.report(
            "plugin_command_refused",
            plugin=plugin,
            combat=combat_id,
            command=command.name,
            code=why.code,
            field=why.field,
            error=why.message,
        )

    # ------------------------------------------------------------------------ observe hooks

    async def proposals(self, applied: Applied) -> list[tuple[str, cmd.Command]]:
        """Call the hooks ``applied``'s events stand for; return the commands plugins
        proposed, in order, each with its plugin's name."""
        after = applied.after
        combat = CombatView(after, applied.seq, self.rules)
        proposed: list[tuple[str, cmd.Command]] = []
        for hook, kwargs in _hook_calls(applied, self.rules):
            outcomes = await self.call(
                hook, after.combat_id, after.disabled_plugins, **kwargs, combat=combat
            )
            proposed.extend(self._commands(outcomes, hook, after.combat_id))
        return [(p, c) for p, c in proposed if self._delegated(p, c, after)]

    def _commands(
        self, outcomes: list[_Outcome], hook: str, combat_id: str
    ) -> list[tuple[str, cmd.Command]]:
        found: list[tuple[str, cmd.Command]] = []
        for o in outcomes:
            value = o.value
            items = [value] if isinstance(value, cmd.Command) else value
            if items is None:
                continue
            try:
                items = list(items)
            except TypeError:
                items = [items]
            commands = [c for c in items if isinstance(c, cmd.Command)]
            if len(commands) != len(items) or len(commands) > MAX_PROPOSALS:
                self.stats[o.plugin].refused += 1
                self.report(
                    "plugin_bad_proposal",
                    plugin=o.plugin,
                    hook=hook,
                    combat=combat_id,
                    error=f"a hook returns at most {MAX_PROPOSALS} commands and nothing else",
                )
            found.extend((o.plugin, c) for c in commands[:MAX_PROPOSALS])
        return found

    def _delegated(self, plugin: str, command: cmd.Command, state: State) -> bool:
        """A plugin answers a reaction window only for a combatant that handed it its
        reactions (R16: a plugin acts only for whom it may act for)."""
        if not isinstance(command, cmd.ClaimReaction | cmd.PassReaction):
            return True
        combatant = state.get(command.combatant)
        allowed = combatant is not None and DELEGATED_TAG in combatant.tags
        if not allowed and isinstance(command, cmd.ClaimReaction) and command.reservation:
            allowed = any(
                r.id == command.reservation
                and r.combatant == command.combatant
                and DELEGATED_TAG in r.action.tags
                for r in state.reservations
            )
        if not allowed:
            self.stats[plugin].refused += 1
            self.report(
                "plugin_command_refused",
                plugin=plugin,
                combat=state.combat_id,
                command=command.name,
                code="not_delegated",
                field="combatant",
            )
        return allowed

    def after_due(self, applied: Applied) -> bool:
        """Whether ``after(applied)`` has anything to do: a loaded plugin's hook one of its
        events may stand for, a plugin enabled again, one to disable, a chain to report cut,
        or the combat's end. A host skips the rest (a queue, a task switch) for every other
        command: most of them."""
        cause = applied.cause
        # ``states[-1]``, not the ``after`` property: a call less for every command.
        # ``type(…) is``, not ``isinstance``: one that fails looks up the value's ``__class__``
        # besides, and these fail for nearly every command and event.
        if applied.states[-1].phase == "ended" or (
            type(cause) is _Cause and cause.depth > MAX_CHAIN
        ):
            return True
        types = self._after_types
        for event in applied.events:
            if type(event) in types or type(event) is ev.PluginEnabled:
                return True
        if not self._due_off:
            return False
        combat_id = applied.after.combat_id
        return any(c == combat_id for c, _ in self._due_off)

    async def after(self, applied: Applied) -> Talk:
        """Let plugins see ``applied``, as a conversation with the pipeline: the commands they
        propose, each as the plugin's, then the disabling of plugins that failed too often. The
        hooks of what those apply are the pipeline's to run next, in commit order; each carries
        its place in its chain, to cut chains too deep (``MAX_CHAIN``) or too broad
        (``MAX_CAUSED``)."""
        combat_id = applied.after.combat_id
        for event in applied.events:
            if isinstance(event, ev.PluginEnabled):
                # Enabled again with its failure count reset (protocol.md, enable_plugin).
                self._off.get(combat_id, set()).discard(event.plugin)
                self._due_off.pop((combat_id, event.plugin), None)
                for key in [k for k in self._streak if k[:2] == (combat_id, event.plugin)]:
                    del self._streak[key]
        cause = applied.cause
        if not isinstance(cause, _Cause):  # a client's or the clock's command starts a chain
            cause = _Cause(0, _Chain(applied.seq))
        if cause.depth > MAX_CHAIN:
            self.report("plugin_chain_cut", combat=combat_id, seq=applied.seq, depth=cause.depth)
        else:
            deeper = _Cause(cause.depth + 1, cause.chain)
            for plugin, wanted in await self.proposals(applied):
                if cause.chain.caused >= MAX_CAUSED:
                    root = cause.chain.root
                    self.report("plugin_chain_cut", plugin=plugin, combat=combat_id, root=root)
                    problem = f"caused over {MAX_CAUSED} commands from one"
                    self._fail(combat_id, plugin, CHAINS, problem)
                    continue
                checked = self._checked(plugin, wanted, combat_id)
                if checked is None:
                    continue
                proposal = Proposal(plugin_actor(plugin), checked, deeper, before_hooks=True)
                outcome = yield proposal
                self._settled(plugin, wanted, combat_id, outcome)
                if isinstance(outcome, Applied):
                    cause.chain.caused += 1
        for plugin, reason, disabling in self._disabling(combat_id):
            outcome = yield disabling
            self._disabled(plugin, combat_id, reason, outcome)
        if applied.after.phase == "ended":
            self.forget(combat_id)

    def _disabling(self, combat_id: str) -> list[tuple[str, str, Proposal]]:
        """A ``disable_plugin`` for every plugin that reached ``max_failures`` in the combat.
        The host stops calling it there first, whether or not the command that records it is
        refused (already disabled, the combat gone or ended, ``MAX_DISABLED_PLUGINS`` reached):
        a failing plugin is never called again in that combat, until a narrator enables it."""
        found = []
        for plugin, reason in self.failing(combat_id):
            self._off.setdefault(combat_id, set()).add(plugin)
            self.stats[plugin].disabled += 1
            disabling = cmd.DisablePlugin(plugin, reason[:MAX_REASON])
            found.append((plugin, reason, Proposal(HOST_ACTOR, disabling)))
        return found

    def _disabled(self, plugin: str, combat_id: str, reason: str, outcome: Outcome) -> None:
        if isinstance(outcome, RefusedError):
            self.report(
                "plugin_disabled",
                plugin=plugin,
                combat=combat_id,
                reason=reason,
                recorded=False,
                code=outcome.code,
            )
        else:
            self.report("plugin_disabled", plugin=plugin, combat=combat_id, reason=reason)


def _hook_calls(applied: Applied, rules: RuleBook) -> list[tuple[str, dict[str, Any]]]:
    """Which hooks the events of one command stand for, with their arguments. Each hook sees
    its subject as it stood at its event, from the states the pipeline folded: the turn just
    started, the window as it closed, the condition as it expired."""
    after = applied.after
    calls: list[tuple[str, dict[str, Any]]] = []
    for i, event in enumerate(applied.events):
        prior, state = applied.states[i], applied.states[i + 1]
        match event:
            case ev.CombatStarted():
                calls.append(("on_combat_start", {"event": event}))
            case ev.CombatEnded():
                calls.append(("on_combat_end", {"event": event}))
            case ev.InitiativeRolled():
                who = after.get(event.combatant)
                if who is not None:
                    calls.append(
                        (
                            "on_initiative_check",
                            {"combatant": who, "check": event.check, "event": event},
                        )
                    )
            case ev.RoundStarted():
                calls.append(("on_round_start", {"round": event.round, "event": event}))
            case ev.RoundEnded():
                calls.append(("on_round_end", {"round": event.round, "event": event}))
            case ev.TurnStarted():
                who = after.get(event.combatant)
                if who is not None and state.turn is not None:
                    calls.append(
                        ("on_turn_start", {"turn": state.turn, "combatant": who, "event": event})
                    )
            case ev.TurnEnded():
                who = after.get(event.combatant)
                if who is not None:
                    calls.append(("on_turn_end", {"combatant": who, "event": event}))
            case ev.ActionDeclared():
                who = after.get(event.combatant)
                if who is not None:
                    calls.append(
                        (
                            "on_action_declared",
                            {"combatant": who, "action": event.action, "event": event},
                        )
                    )
            case ev.WindowOpened():
                window = event.window
                calls.append(("on_window_open", {"window": window, "event": event}))
                # Only a window still open can be answered.
                still = after.window
                if still is not None and still.id == window.id and still.status == "open":
                    calls.append(
                        (
                            "on_trigger",
                            {
                                "window": still,
                                "offered": CombatView(after, 0, rules).offered(window),
                            },
                        )
                    )
            case ev.WindowClosed():
                if prior.window is not None:
                    calls.append(("on_window_close", {"window": prior.window, "event": event}))
            case ev.ConditionApplied():
                calls.append(
                    ("on_condition_applied", {"condition": event.condition, "event": event})
                )
            case ev.ConditionExpired():
                gone = next((c for c in prior.conditions if c.id == event.condition), None)
                if gone is not None:
                    calls.append(("on_condition_expired", {"condition": gone, "event": event}))
            case _:
                pass
    return calls
