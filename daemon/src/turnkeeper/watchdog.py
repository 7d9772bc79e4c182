"""Notices when the event loop stops answering, or a plugin's call goes on and on, and says so
while it lasts.

Plugins' hooks run in their own threads (``turnkeeper_sdk.plugins``), so none can hold the event
loop; something else still could (a bug in the daemon, a slow disk under SQLite), and only
another thread can report it while it lasts. A plugin call the host gave up on keeps its thread
until it returns, perhaps never: that is reported too, once per call, with how long it has run.
"""

from __future__ import annotations

import threading
import time

import anyio
import structlog

from turnkeeper_sdk.plugins import HeldCall, PluginHost

log = structlog.get_logger("turnkeeper.plugins")

BEAT = 0.1
"""Seconds between the event loop's heartbeats: also how often the watching thread looks."""

STALL = 1.0
"""Seconds without a heartbeat that count as a held event loop, and that a plugin call may run
before it is reported as stuck: far beyond any command's own work or any hook's budget, well
within what a person at the table notices."""


class Watchdog:
    """A heartbeat on the event loop and a thread that watches it and the plugins' calls."""

    def __init__(self, plugins: PluginHost | None, stall: float = STALL) -> None:
        self.plugins = plugins
        self.stall = stall
        self.last = time.monotonic()
        self._stop = threading.Event()

    async def run(self) -> None:
        """Beat until cancelled, with the watching thread running meanwhile."""
        thread = threading.Thread(target=self._watch, name="turnkeeper-watchdog", daemon=True)
        thread.start()
        try:
            while True:
                self.last = time.monotonic()
                await anyio.sleep(BEAT)
        finally:
            self._stop.set()

    def _watch(self) -> None:
        reported = False
        stuck: set[HeldCall] = set()
        while not self._stop.wait(BEAT):
            now = time.monotonic()
            held = now - self.last
            if held <= self.stall:
                reported = False
            elif not reported:
                # Reported once per stall, while it lasts: the loop may never come back.
                reported = True
                log.error("event_loop_blocked", seconds=round(held, 1), calls=self._calls())
            if self.plugins is not None:
                running = set(self.plugins.held())
                for call in running - stuck:
                    if now - call.since > self.stall:
                        stuck.add(call)
                        log.error(
                            "plugin_call_stuck",
                            plugin=call.plugin,
                            hook=call.hook,
                            combat=call.combat,
                            seconds=round(now - call.since, 1),
                        )
                stuck &= running

    def _calls(self) -> list[str]:
        """The plugin calls under way."""
        if self.plugins is None:
            return []
        now = time.monotonic()
        try:
            calls = list(self.plugins.in_progress.values())
        except RuntimeError:  # changed while copied: the loop is moving again
            return []
        return [
            f"{plugin}.{hook} in {combat} for {now - since:.1f} s"
            for plugin, hook, combat, since in calls
        ]
