"""Plugins inside a real daemon process: their commands take a client's path and are recorded as
theirs, failing ones are disabled per combat while the rest go on, and the listing (over the
wire and from the command line) shows what loaded, failed and was skipped.

The fixture plugins live in tests/plugin_fixtures/ and load by import path (``--plugin``); the
daemon inherits a PYTHONPATH that finds them. Of the installed plugins only the bundled rulesets
load (``--plugins rulesets``), so whatever else is installed cannot change what these tests see.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon import CallError, Client, Daemon, running
from turnkeeper import app
from turnkeeper.combats import Hub
from turnkeeper.combats import hooks as hook_workers
from turnkeeper.combats.clock import CLOCK_ACTOR
from turnkeeper.store import Store
from turnkeeper_engine import NARRATOR
from turnkeeper_engine import commands as cmd
from turnkeeper_engine.decide import MAX_CONDITION_ROUNDS, MAX_ITEMS, MAX_NAME, MAX_TEXT
from turnkeeper_sdk import CombatView, hookimpl
from turnkeeper_sdk.plugins import PluginHost

TESTS = Path(__file__).resolve().parent
BIG = "\U0001f600" * MAX_NAME
"""The longest name, in four-byte characters: the most bytes one name field can take."""
WAIT_SECONDS = 20.0
"""How long a test waits for the background hooks to act, on a busy machine."""
DRAIN_SLACK = 5.0
"""Seconds past the drain timeout a stopping daemon may take to close, on a busy machine."""
BUDGET = ("--plugin-budget-ms", "200")
"""Far above a well-behaved hook's time even on a loaded 2-core machine, far below the failing
fixtures' 0.5 s of blocking and 5 s of sleeping."""


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon subprocess (and ``turnkeeper plugins``) find ``plugin_fixtures``."""
    paths = [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.delenv("TURNKEEPER_PLUGINS", raising=False)
    monkeypatch.delenv("TURNKEEPER_NO_PLUGINS", raising=False)


def _fixture(name: str) -> list[str]:
    return ["--plugin", f"{name}=plugin_fixtures.{name}"]


def _daemon(
    root: Path, *fixtures: str, extra: tuple[str, ...] = ()
) -> AbstractContextManager[Daemon]:
    """A daemon with the bundled rulesets and these fixture plugins."""
    plugins = [a for name in fixtures for a in _fixture(name)]
    return running(root, False, "--plugins", "rulesets", *plugins, *extra)


def _combat(c: Client, *combatants: tuple[str, list[int]], combat: str = "bank") -> None:
    """A marvel combat with combatants whose initiative faces are given (no Fantastic)."""
    c.call("create_combat", request_id=f"{combat}-create", combat_id=combat, ruleset="marvel")
    for who, faces in combatants:
        c.call(
            "add_combatant",
            request_id=f"{combat}-add-{who}",
            combat=combat,
            id=who,
            display_name=who.title(),
            faces=faces,
        )


def _end_turn(c: Client, n: int, combat: str = "bank") -> None:
    turn = c.call("get_combat", combat=combat)["view"]["turn"]
    ref = {"round": turn["round"], "combatant": turn["combatant"]}
    c.call("end_turn", request_id=f"{combat}-end-{n}", combat=combat, turn=ref)


def _events(c: Client, combat: str = "bank") -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = c.call("history", combat=combat, after=after, limit=1000)
        found += page["events"]
        if page["until"] >= page["seq"]:
            return found
        after = page["until"]


def _wait_for(
    c: Client, done: Callable[[list[dict[str, Any]]], bool], combat: str = "bank"
) -> list[dict[str, Any]]:
    """The combat's events once ``done`` holds for them: plugins act after the reply."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        events = _events(c, combat)
        if done(events):
            return events
        assert time.monotonic() < deadline, f"still waiting; events: {events}"
        time.sleep(0.05)


def _named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


def _recorded_by(events: list[dict[str, Any]], via: str) -> list[str]:
    return [e["command"] for e in _named(events, "command_recorded") if e["actor"]["via"] == via]


def _loaded(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in listing["loaded"]}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", "plugins", *args],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=False,
        env={**os.environ, **(env or {})},
    )


# ------------------------------------------------------------------------- proposed commands


def test_r16_a_plugins_command_on_turn_start_is_recorded_as_the_plugins(tmp_path: Path) -> None:
    with _daemon(tmp_path, "outcome") as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        events = _wait_for(c, lambda es: bool(_named(es, "outcome_recorded")))
        (outcome,) = _named(events, "outcome_recorded")
        assert (outcome["kind"], outcome["combatant"]) == ("turn_seen", "spidey")
        recorded = next(
            e for e in _named(events, "command_recorded") if e["seq"] == outcome["seq"] - 1
        )
        assert recorded["command"] == "record_outcome"
        assert recorded["actor"] == {"role": "narrator", "user": None, "via": "plugin:outcome"}
        assert _loaded(c.call("list_plugins"))["outcome"]["version"] == "1.2.3"


def test_r8_a_before_combat_start_plugin_marks_surprise_before_the_initiative_check(
    tmp_path: Path,
) -> None:
    with _daemon(tmp_path, "unaware") as d:
        c = d.client()
        c.call("create_combat", request_id="create", combat_id="bank", ruleset="marvel")
        for who, tags in (("spidey", []), ("goon", ["unaware"])):
            c.call(
                "add_combatant",
                request_id=f"add-{who}",
                combat="bank",
                id=who,
                display_name=who.title(),
                tags=tags,
            )
        started = c.call("start_combat", request_id="start", combat="bank")
        events = _events(c)
        (marked,) = _named(events, "surprise_marked")
        assert marked["combatant"] == "goon"
        assert _recorded_by(events, "plugin:unaware") == ["mark_surprised"]
        # Before the start: the start's own events (its check for goon) come after it.
        assert marked["seq"] < started["events"][0]["seq"]
        goon_check = next(e for e in _named(events, "initiative_rolled") if "goon" in e["members"])
        assert marked["seq"] < goon_check["seq"]
        assert started["events"][0]["command"] == "start_combat"


def test_a_reply_never_waits_for_the_hooks_its_command_causes(tmp_path: Path) -> None:
    # A 1.5 s budget lets the sleeping plugin hold each hook for 1.5 s: the replies come at once
    # all the same, and the good plugin's commands follow once the slow hooks are given up on.
    with _daemon(tmp_path, "sleeping", "outcome", extra=("--plugin-budget-ms", "1500")) as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        started = time.monotonic()
        c.call("start_combat", request_id="start", combat="bank")
        _end_turn(c, 1)
        assert time.monotonic() - started < 1.5
        assert not _named(_events(c), "outcome_recorded")
        events = _wait_for(c, lambda es: len(_named(es, "outcome_recorded")) == 2)
        assert [e["combatant"] for e in _named(events, "outcome_recorded")] == ["spidey", "ock"]


# --------------------------------------------------------------------------- failing plugins


def test_failing_plugins_are_disabled_for_the_combat_after_three_failures_the_rest_go_on(
    tmp_path: Path,
) -> None:
    failing = ("raising", "sleeping", "blocking")
    with _daemon(tmp_path, "outcome", *failing, extra=BUDGET) as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        _end_turn(c, 1)
        _end_turn(c, 2)
        events = _wait_for(c, lambda es: len(_named(es, "plugin_disabled")) == 3)
        disabled = {e["plugin"]: e["reason"] for e in _named(events, "plugin_disabled")}
        assert set(disabled) == set(failing)
        assert disabled["raising"].startswith("3 failures in a row of on_turn_start: RuntimeError")
        # Cancelled at its budget; on a loaded machine it may stop late enough to be given up
        # on: either way it failed, and three times.
        assert "timeout after 200 ms" in disabled["sleeping"] or (
            "still running" in disabled["sleeping"]
        )
        # Its time.sleep runs in its own thread, past the budget: given up on, never waited for.
        assert "still running" in disabled["blocking"]
        assert _recorded_by(events, "daemon") == ["disable_plugin"] * 3
        assert sorted(c.call("get_combat", combat="bank")["view"]["disabled_plugins"]) == sorted(
            failing
        )

        # The combat and the good plugin go on; the disabled ones are not called any more.
        _end_turn(c, 3)
        events = _wait_for(c, lambda es: len(_named(es, "outcome_recorded")) == 4)
        assert _recorded_by(events, "plugin:outcome") == ["record_outcome"] * 4
        listing = _loaded(c.call("list_plugins"))
        assert listing["raising"]["errors"] == listing["raising"]["calls"] == 3
        assert listing["sleeping"]["timeouts"] + listing["sleeping"]["blocked"] == 3
        assert listing["blocking"]["blocked"] == listing["blocking"]["calls"] == 3
        assert {listing[name]["disabled"] for name in failing} == {1}
        good = listing["outcome"]
        assert (good["calls"], good["errors"], good["timeouts"], good["blocked"]) == (4, 0, 0, 0)

        # Another combat still calls every plugin: disabling is per combat.
        _combat(c, ("cap", [2, 3, 4]), combat="other")
        c.call("start_combat", request_id="other-start", combat="other")
        _wait_for(c, lambda es: bool(_named(es, "outcome_recorded")), combat="other")
        assert _loaded(c.call("list_plugins"))["raising"]["calls"] == 4


def _applied(c: Client, request_id: str, method: str, **params: Any) -> bool:
    """Whether the command was applied; refused only for the combat's size."""
    try:
        c.call(method, request_id=request_id, combat="full", **params)
    except CallError as e:
        refused = e
    else:
        return True
    assert refused.code == "combat_too_large", refused
    return False


def _brimful(c: Client) -> None:
    """Combat "full": maximal combatants, then conditions, the last one's note as long as fits,
    so that not one more byte of content fits (as tests/test_limits.py's ``brimful``)."""
    c.call("create_combat", request_id="full-create", combat_id="full", ruleset="marvel")
    n = 0
    while _applied(c, f"add-{n}", "add_combatant", **_maximal(n)):
        n += 1
    who = f"000{BIG[: MAX_NAME - 3]}"
    tries = itertools.count()

    def noted(size: int) -> bool:
        return _applied(
            c,
            f"note-{next(tries)}",
            "apply_condition",
            target=who,
            type="custom",
            rounds=MAX_CONDITION_ROUNDS,
            note="x" * size,
        )

    def fits(size: int) -> bool:
        if not noted(size):
            return False
        c.call("undo", request_id=f"undo-{next(tries)}", combat="full")
        return True

    added = 0
    while noted(MAX_TEXT):
        added += 1
    assert added
    if not fits(1):
        c.call("undo", request_id=f"undo-{next(tries)}", combat="full")
        assert noted(MAX_TEXT // 2)
    low, high = 1, MAX_TEXT
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    assert noted(low)
    assert not noted(1)


def _maximal(n: int) -> dict[str, Any]:
    """A combatant whose every text field is as long as allowed, in four-byte characters."""
    tag = BIG[: MAX_NAME - 3]
    return {
        "id": f"{n:03d}{tag}",
        "display_name": BIG,
        "controller": BIG,
        "init_mod": n,  # no ties
        "tags": [f"{i:02d}:{tag}" for i in range(MAX_ITEMS)],
        "faces": [2, 3, 4],
    }


def test_a_failing_plugin_is_disabled_in_a_combat_full_to_its_size_limit(tmp_path: Path) -> None:
    """Not one more byte of content fits the combat: the daemon's disable_plugin for the raising
    plugin is taken all the same (room is kept for it), and it is not called there again."""
    with _daemon(tmp_path, "raising", "outcome", extra=BUDGET) as d:
        c = d.client()
        _brimful(c)
        c.call("start_combat", request_id="start", combat="full")
        for n in range(1, 5):
            _end_turn(c, n, combat="full")
        events = _wait_for(c, lambda es: len(_named(es, "outcome_recorded")) == 5, combat="full")
        (disabled,) = _named(events, "plugin_disabled")
        assert disabled["plugin"] == "raising"
        assert _recorded_by(events, "daemon") == ["disable_plugin"]
        assert c.call("get_combat", combat="full")["view"]["disabled_plugins"] == ["raising"]
        listing = _loaded(c.call("list_plugins"))["raising"]
        assert (listing["calls"], listing["errors"], listing["disabled"]) == (3, 3, 1)


def test_a_plugin_call_running_long_is_reported_while_it_runs_and_never_holds_the_loop(
    tmp_path: Path,
) -> None:
    """The stalling plugin sleeps 2.5 s in its hook: in its own thread, so the daemon answers
    meanwhile, and the watchdog names the call while it runs (one that never returned would be
    reported all the same)."""
    with _daemon(tmp_path, "stalling") as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]))
        c.call("start_combat", request_id="start", combat="bank")
        # Given up on at its budget: counted at once, long before the call returns.
        listing = _wait_for_listing(c, lambda p: p["stalling"]["blocked"] == 1)
        assert listing["stalling"]["calls"] == 1
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            lines = [
                json.loads(line) for line in d.log.read_text().splitlines() if line.startswith("{")
            ]
            stuck = [line for line in lines if line["event"] == "plugin_call_stuck"]
            if stuck or time.monotonic() > deadline:
                break
            c.call("list_combats")  # the loop answers while the hook runs
            time.sleep(0.05)
        (line,) = stuck
        assert [line["plugin"], line["hook"], line["combat"]] == [
            "stalling",
            "on_turn_start",
            "bank",
        ]
        # Reported while the hook still ran: it sleeps 2.5 s.
        assert line["seconds"] < 2.5
        assert not [line for line in lines if line["event"] == "event_loop_blocked"]


def test_an_async_plugin_keeps_its_event_loop_between_calls(tmp_path: Path) -> None:
    """The keeping plugin ties an event and a task to its loop in its first call: every later
    call finds the same loop (its event still usable), with pauses between calls, and the task
    counts on while no call runs, as it did when hooks ran on the daemon's own loop."""
    with _daemon(tmp_path, "keeping", extra=BUDGET) as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        for n in range(1, 4):
            _wait_for(c, lambda es, n=n: len(_named(es, "outcome_recorded")) == n)
            time.sleep(0.5)
            _end_turn(c, n)
        events = _wait_for(c, lambda es: len(_named(es, "outcome_recorded")) == 4)
        texts = [e["text"] for e in _named(events, "outcome_recorded")]
        assert all(": same loop True, ticks " in text for text in texts), texts
        ticks = [int(text.rsplit(" ", 1)[1]) for text in texts]
        # Every 10 ms while no call runs: some 50 times in each pause, and a loop that ran
        # only during calls would count about once.
        assert all(b - a >= 10 for a, b in itertools.pairwise(ticks)), texts
        assert not _named(events, "plugin_disabled")
        listing = _loaded(c.call("list_plugins"))["keeping"]
        assert (listing["calls"], listing["errors"], listing["timeouts"]) == (4, 0, 0)


def test_a_hook_failing_every_time_is_disabled_though_another_of_its_hooks_succeeds_between(
    tmp_path: Path,
) -> None:
    with _daemon(tmp_path, "half_broken", "outcome") as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        for n in range(1, 4):
            _end_turn(c, n)
        events = _wait_for(c, lambda es: bool(_named(es, "plugin_disabled")))
        (disabled,) = _named(events, "plugin_disabled")
        assert disabled["plugin"] == "half_broken"
        assert disabled["reason"] == (
            "3 failures in a row of on_turn_start: "
            "RuntimeError: this hook fails on purpose, every time"
        )
        listing = _loaded(c.call("list_plugins"))["half_broken"]
        # Its on_turn_end succeeded between each two failures; after the third, no more calls.
        assert (listing["calls"], listing["errors"]) == (5, 3)


def test_a_hook_ignoring_its_cancellation_holds_no_reply_and_no_worker(tmp_path: Path) -> None:
    """The deaf plugin's first on_turn_start never ends. Replies come at once all the same, far
    past what a hook worker's queue holds (256 commands), the other plugin still sees every turn,
    and the deaf one, not called while its call runs, is disabled for the combat."""
    with _daemon(tmp_path, "deaf", "outcome", extra=BUDGET) as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        for n in range(300):
            c.call("record_outcome", request_id=f"note-{n}", combat="bank", kind="note", text="n")
        for n in range(1, 4):
            _end_turn(c, n)
        events = _wait_for(
            c,
            lambda es: (
                bool(_named(es, "plugin_disabled")) and len(_named(es, "outcome_recorded")) == 304
            ),
        )
        (disabled,) = _named(events, "plugin_disabled")
        assert disabled["plugin"] == "deaf"
        assert disabled["reason"].startswith("3 failures in a row of on_turn_start: not called:")
        listing = _loaded(c.call("list_plugins"))
        assert listing["deaf"]["blocked"] == listing["deaf"]["calls"] == 3
        assert _recorded_by(events, "plugin:outcome") == ["record_outcome"] * 4


def test_a_busy_looping_hook_freezes_nothing_and_sigterm_ends_the_daemon_within_its_drain(
    tmp_path: Path,
) -> None:
    """The spinning plugin never returns from its first on_turn_start. Python cannot stop the
    thread it spins in: the daemon stops calling it, goes on serving, and exits cleanly on
    SIGTERM, within its drain timeout, with every acknowledged command kept."""
    with _daemon(tmp_path, "spinning", "outcome", extra=BUDGET) as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        for n in range(1, 4):
            acknowledged = c.call(
                "end_turn",
                request_id=f"bank-end-{n}",
                combat="bank",
                turn=_turn(c),
            )["seq"]
        events = _wait_for(
            c,
            lambda es: (
                bool(_named(es, "plugin_disabled")) and len(_named(es, "outcome_recorded")) == 4
            ),
        )
        (disabled,) = _named(events, "plugin_disabled")
        assert disabled["plugin"] == "spinning"
        assert _loaded(c.call("list_plugins"))["spinning"]["blocked"] == 3
        acknowledged = max(acknowledged, events[-1]["seq"])
        assert d.process is not None
        stopping = time.monotonic()
        d.process.send_signal(signal.SIGTERM)
        assert d.process.wait(timeout=app.DRAIN_TIMEOUT + WAIT_SECONDS) == 0
        assert time.monotonic() - stopping < app.DRAIN_TIMEOUT
        d.start()
        c = d.client()
        assert c.call("get_combat", combat="bank")["seq"] == acknowledged
        assert _events(c)[-1]["seq"] == acknowledged


@pytest.mark.slow
def test_sigterm_ends_the_daemon_within_its_drain_though_a_command_waits_on_a_before_hook(
    tmp_path: Path,
) -> None:
    """A minute's budget lets the dawdling plugin hold start_combat for a minute: at SIGTERM the
    command gets the drain timeout, then goes on without plugins, and the daemon exits."""
    with _daemon(tmp_path, "dawdling", extra=("--plugin-budget-ms", "60000")) as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]))
        acknowledged = c.call("get_combat", combat="bank")["seq"]
        starter = d.client()
        threading.Thread(
            target=_quietly,
            args=(starter.call, "start_combat"),
            kwargs={"request_id": "start", "combat": "bank"},
            daemon=True,
        ).start()
        _wait_for_listing(c, lambda p: p["dawdling"]["calls"] == 1)
        assert d.process is not None
        stopping = time.monotonic()
        d.process.send_signal(signal.SIGTERM)
        assert d.process.wait(timeout=app.DRAIN_TIMEOUT + WAIT_SECONDS) == 0
        assert time.monotonic() - stopping < app.DRAIN_TIMEOUT + DRAIN_SLACK
        d.start()
        c = d.client()
        assert _events(c)[acknowledged - 1]["seq"] == acknowledged
        # The command in flight was committed once, without the plugin: a retry gets its result.
        retried = c.call("start_combat", request_id="start", combat="bank")
        assert retried["events"][0]["command"] == "start_combat"
        assert len(_named(_events(c), "combat_started")) == 1


def _quietly(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """A call whose connection the daemon may close before it answers."""
    with contextlib.suppress(Exception):
        call(*args, **kwargs)


def _turn(c: Client, combat: str = "bank") -> dict[str, Any]:
    turn = c.call("get_combat", combat=combat)["view"]["turn"]
    return {"round": turn["round"], "combatant": turn["combatant"]}


def _wait_for_listing(c: Client, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        listing = _loaded(c.call("list_plugins"))
        if done(listing) or time.monotonic() > deadline:
            return listing
        time.sleep(0.05)


def test_a_disabled_plugin_stays_disabled_across_a_kill_and_restart(tmp_path: Path) -> None:
    with _daemon(tmp_path, "raising", "outcome") as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]), ("ock", [1, 2, 2]))
        c.call("start_combat", request_id="start", combat="bank")
        _end_turn(c, 1)
        _end_turn(c, 2)
        _wait_for(c, lambda es: bool(_named(es, "plugin_disabled")))
        d.kill()
        d.start()
        c = d.client()
        assert c.call("get_combat", combat="bank")["view"]["disabled_plugins"] == ["raising"]
        _end_turn(c, 3)
        _wait_for(c, lambda es: len(_named(es, "outcome_recorded")) == 4)
        listing = _loaded(c.call("list_plugins"))
        assert listing["raising"]["calls"] == 0
        assert listing["outcome"]["calls"] == 1


# ---------------------------------------------------------------------------------- listing


def test_list_plugins_shows_the_bundled_rulesets_to_any_role(tmp_path: Path) -> None:
    with _daemon(tmp_path) as d:
        secret = d.token("observer")
        c = Client.unix(d.socket)
        assert c.hello(secret)["session"]["role"] == "observer"
        rulesets = _loaded(c.call("list_plugins"))["rulesets"]
        assert rulesets["hooks"] == ["turnkeeper_rulesets"]
        assert rulesets["provides"] == ["ruleset:marvel", "ruleset:dnd3e"]
        assert rulesets["version"] == "0.1.0"


def test_a_plugin_that_fails_to_import_is_listed_as_failed_and_the_daemon_serves(
    tmp_path: Path,
) -> None:
    with _daemon(tmp_path, "broken", "outcome") as d:
        c = d.client()
        listing = c.call("list_plugins")
        (failed,) = [f for f in listing["failed"] if f["name"] == "broken"]
        assert failed["error"] == "import failed: RuntimeError: this plugin is broken on purpose"
        assert "outcome" in _loaded(listing)
        _combat(c, ("spidey", [2, 3, 4]))
        c.call("start_combat", request_id="start", combat="bank")
        _wait_for(c, lambda es: bool(_named(es, "outcome_recorded")))
        logged = [json.loads(line) for line in d.log.read_text().splitlines()]
        assert any(
            line["event"] == "plugin_load_failed" and line["plugin"] == "broken" for line in logged
        )

    done = _cli(*_fixture("broken"), "--json")
    assert done.returncode == 0, done.stderr
    (failed,) = [f for f in json.loads(done.stdout)["failed"] if f["name"] == "broken"]
    assert "RuntimeError: this plugin is broken on purpose" in failed["error"]
    text = _cli(*_fixture("broken"), *_fixture("misspelled"))
    assert text.returncode == 0, text.stderr
    assert "failed:\n  broken: import failed: RuntimeError" in text.stdout
    assert "unknown hooks: on_turn_strat (did you mean on_turn_start?)" in text.stdout
    assert "provides: ruleset:marvel, ruleset:dnd3e" in text.stdout


def test_a_misspelled_hook_shows_in_unknown_hooks_and_is_never_called(tmp_path: Path) -> None:
    with _daemon(tmp_path, "misspelled") as d:
        c = d.client()
        _combat(c, ("spidey", [2, 3, 4]))
        c.call("start_combat", request_id="start", combat="bank")
        _end_turn(c, 1)
        plugin = _loaded(c.call("list_plugins"))["misspelled"]
        assert plugin["unknown_hooks"] == ["on_turn_strat (did you mean on_turn_start?)"]
        assert plugin["hooks"] == ["on_round_start"]
        assert plugin["errors"] == 0


def test_allow_and_block_lists_by_flag_and_by_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNKEEPER_NO_PLUGINS", "rulesets")
    with running(tmp_path) as d:
        c = d.client()
        listing = c.call("list_plugins")
        assert {"name": "rulesets", "reason": "in the block list"} in listing["skipped"]
        assert "rulesets" not in _loaded(listing)
        # The engine's own rulesets need no plugin: a marvel combat still opens.
        c.call("create_combat", request_id="create", combat_id="bank", ruleset="marvel")
    monkeypatch.delenv("TURNKEEPER_NO_PLUGINS")

    def listing(*args: str, **env: str) -> dict[str, Any]:
        done = _cli("--json", *args, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    only = listing("--plugins", "rulesets")
    assert "rulesets" in _loaded(only)
    assert all(s["reason"] == "not in the allow list" for s in only["skipped"])
    blocked = listing(TURNKEEPER_NO_PLUGINS="rulesets")
    assert {"name": "rulesets", "reason": "in the block list"} in blocked["skipped"]
    allowed_elsewhere = listing(TURNKEEPER_PLUGINS="nothing-installed")
    assert {"name": "rulesets", "reason": "not in the allow list"} in allowed_elsewhere["skipped"]
    assert {"name": "nothing-installed", "error": "in the allow list but not installed"} in (
        allowed_elsewhere["failed"]
    )
    # The flag wins over the environment.
    assert "rulesets" in _loaded(listing("--plugins", "rulesets", TURNKEEPER_PLUGINS="other"))
    assert "rulesets" in _loaded(listing("--no-plugins", "other", TURNKEEPER_NO_PLUGINS="rulesets"))
    # A path plugin is named explicitly: the allow list does not apply to it.
    both = listing("--plugins", "rulesets", *_fixture("outcome"))
    assert set(_loaded(both)) == {"rulesets", "outcome"}

    bad = _cli("--plugins", ",")
    assert bad.returncode == 2
    assert "expected NAME[,NAME...]" in bad.stderr


# ------------------------------------------------------------------------- the hub in process


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_hooks_run_in_event_order_and_a_full_queue_slows_the_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many writers at once on one combat, a slow plugin and a tiny queue: what a real daemon
    # cannot show quickly. Every hook runs, in seq order, and no writer is answered while
    # more than the queue's worth of its combat's hooks are still due.
    monkeypatch.setattr(hook_workers, "HOOK_QUEUE", 2)
    seen: list[int] = []

    class Slow:
        @hookimpl
        async def on_condition_applied(self, combat: CombatView) -> None:
            await anyio.sleep(0.002)
            seen.append(combat.seq)

    plugins = PluginHost(budget=5.0)
    plugins.register(Slow(), "slow")
    store = Store.open(tmp_path)
    hub = Hub(store, plugins=plugins)
    writers = 30
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        async with anyio.create_task_group() as hooks:
            hooks.start_soon(hub.run_hooks)
            await hub.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "create")
            add = cmd.AddCombatant("spidey", "Spider-Man")
            await hub.execute("p", NARRATOR, "bank", add, "add")
            async with anyio.create_task_group() as clients:
                for n in range(writers):
                    command = cmd.ApplyCondition("spidey", "custom", note=f"n{n}")
                    clients.start_soon(hub.execute, "p", NARRATOR, "bank", command, f"w{n}")
            # Backpressure: the last writer was answered once its hooks found room in the
            # queue, so at most the queue's worth plus the one running were still due.
            assert len(seen) >= writers - hook_workers.HOOK_QUEUE - 1
            with anyio.fail_after(WAIT_SECONDS):
                while len(seen) < writers:
                    await anyio.sleep(0.01)
            hooks.cancel_scope.cancel()
        await store.stop()
    store.close()
    assert seen == sorted(seen)
    assert len(set(seen)) == writers


def _recording_hub(tmp_path: Path) -> tuple[Hub, list[tuple[str, str]]]:
    """A hub on a real store, with one plugin recording each condition applied (combat, note)
    as its hook runs."""
    seen: list[tuple[str, str]] = []

    class Records:
        @hookimpl
        def on_condition_applied(self, combat: CombatView, condition: Any) -> None:
            seen.append((combat.id, condition.note))

    plugins = PluginHost()
    plugins.register(Records(), "records")
    return Hub(Store.open(tmp_path), plugins=plugins), seen


@pytest.mark.anyio
async def test_r13_the_clock_never_waits_on_a_full_hook_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plugins fall behind and the hook queue fills: a client waits before its command commits,
    # but the clock must keep every combat's timers going. It takes room when there is some,
    # and when there is none its command commits all the same, without hooks: the queue stays
    # bounded.
    monkeypatch.setattr(hook_workers, "HOOK_QUEUE", 2)
    monkeypatch.setattr(hook_workers, "HOOK_WORKERS", 1)
    hub, seen = _recording_hub(tmp_path)
    store = hub.store

    def noted(text: str) -> cmd.ApplyCondition:
        return cmd.ApplyCondition("k", "custom", note=text)

    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for combat_id in ("bank", "vault"):
            create = cmd.CreateCombat(combat_id, "marvel")
            await hub.execute("p", NARRATOR, combat_id, create, f"create-{combat_id}")
            # No hook of the plugin stands for these: they take no place in the queue.
            await hub.execute("p", NARRATOR, combat_id, cmd.AddCombatant("k", "K"), combat_id)
        vault = await hub.combat("vault")
        # No worker runs yet: a client's command and a clock's take the two places.
        await hub.execute("p", NARRATOR, "bank", noted("x"), "x")
        with anyio.fail_after(1):
            await hub.writer.run(vault, None, CLOCK_ACTOR, noted("a"))
        bank = await hub.combat("bank")
        seq = bank.seq
        with anyio.move_on_after(0.2) as blocked:
            await hub.execute("p", NARRATOR, "bank", noted("y"), "y")
        # A client waits here, before its command is committed, never after.
        assert blocked.cancelled_caught
        assert bank.seq == seq
        with anyio.fail_after(1):  # the clock does not wait
            await hub.writer.run(vault, None, CLOCK_ACTOR, noted("b"))
        async with anyio.create_task_group() as hooks:
            hooks.start_soon(hub.run_hooks)
            with anyio.fail_after(WAIT_SECONDS):
                # The places free up as the hooks run: a client gets in again, the clock too.
                await hub.execute("p", NARRATOR, "bank", noted("y"), "y")
                await hub.writer.run(vault, None, CLOCK_ACTOR, noted("c"))
                while len(seen) < 4:
                    await anyio.sleep(0.01)
            hooks.cancel_scope.cancel()
        await store.stop()
    store.close()
    assert bank.seq > seq
    # Every condition is applied; the hooks of the one the clock applied with the queue full
    # never run.
    assert [c.note for c in vault.state.conditions] == ["a", "b", "c"]
    assert sorted(seen) == [("bank", "x"), ("bank", "y"), ("vault", "a"), ("vault", "c")]


@pytest.mark.anyio
async def test_a_command_no_loaded_hook_stands_for_is_never_queued_for_the_hook_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No worker runs and a combat may hold one place in the queue: commands whose events the
    # plugin has no hook for go by one after another (each frees the place it took), and only
    # the condition, whose hook the plugin has, waits for the workers.
    monkeypatch.setattr(hook_workers, "HOOK_QUEUE_PER_COMBAT", 1)
    hub, seen = _recording_hub(tmp_path)
    store = hub.store
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "bank", cmd.CreateCombat("bank", "marvel"), "create")
        with anyio.fail_after(WAIT_SECONDS):
            for n in range(5):
                add = cmd.AddCombatant(f"k{n}", "K")
                await hub.execute("p", NARRATOR, "bank", add, f"add-{n}")
            note = cmd.ApplyCondition("k0", "custom", note="x")
            await hub.execute("p", NARRATOR, "bank", note, "x")
        bank = await hub.combat("bank")
        assert [a.command for a, _ in bank.hooks_due] == [note]
        assert bank.places == 1
        await store.stop()
    store.close()
    assert seen == []


@pytest.mark.anyio
async def test_a_combat_whose_plugins_fall_behind_holds_up_only_its_own_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One worker for every combat, and no hook run yet: bank's client has taken its combat's
    # share of the worker's queue and waits before its next command commits, while vault's
    # client, on the same worker, is answered at once. Then the worker's combats take turns,
    # one command's hooks each, rather than one combat's whole backlog first.
    monkeypatch.setattr(hook_workers, "HOOK_WORKERS", 1)
    monkeypatch.setattr(hook_workers, "HOOK_QUEUE", 4)
    monkeypatch.setattr(hook_workers, "HOOK_QUEUE_PER_COMBAT", 2)
    hub, seen = _recording_hub(tmp_path)
    store = hub.store

    async def note(combat_id: str, text: str) -> None:
        command = cmd.ApplyCondition("k", "custom", note=text)
        await hub.execute("p", NARRATOR, combat_id, command, f"{combat_id}-{text}")

    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for combat_id in ("bank", "vault"):
            create = cmd.CreateCombat(combat_id, "marvel")
            await hub.execute("p", NARRATOR, combat_id, create, f"create-{combat_id}")
            await hub.execute("p", NARRATOR, combat_id, cmd.AddCombatant("k", "K"), combat_id)
        await note("bank", "b1")
        await note("bank", "b2")
        bank = await hub.combat("bank")
        seq = bank.seq
        with anyio.move_on_after(0.2) as blocked:
            await note("bank", "b3")
        assert blocked.cancelled_caught
        assert bank.seq == seq
        with anyio.fail_after(WAIT_SECONDS):  # the worker's queue has room for vault
            await note("vault", "v1")
        async with anyio.create_task_group() as hooks:
            hooks.start_soon(hub.run_hooks)
            with anyio.fail_after(WAIT_SECONDS):
                await note("bank", "b3")
                while len(seen) < 4:
                    await anyio.sleep(0.01)
            hooks.cancel_scope.cancel()
        await store.stop()
    store.close()
    assert seen == [("bank", "b1"), ("vault", "v1"), ("bank", "b2"), ("bank", "b3")]
