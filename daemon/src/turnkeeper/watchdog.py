"""Notices when the event loop stops answering, and says which plugin call holds it.

A hook that blocks (``time.sleep``, blocking I/O, a busy loop) holds every combat of the
daemon. The plugin host counts such a call once it returns; one that does not return for a long
time, or never, must be reported while it holds the loop, which only another thread can do.
"""

from __future__ import annotations

import threading
import time

import anyio
import structlog

from turnkeeper_sdk.plugins import PluginHost

log = structlog.get_logger("turnkeeper.plugins")

BEAT = 0.1
"""Seconds between the event loop's heartbeats: also how often the watching thread looks."""

STALL = 1.0
"""Seconds without a heartbeat that count as a held event loop: far beyond any command's own
work, well within what a person at the table notices."""


class Watchdog:
    """A heartbeat on the event loop and a thread that watches it."""

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
        while not self._stop.wait(BEAT):
            held = time.monotonic() - self.last
            if held <= self.stall:
                reported = False
            elif not reported:
                # Reported once per stall, while it lasts: the loop may never come back.
                reported = True
                log.error("event_loop_blocked", seconds=round(held, 1), calls=self._calls())

    def _calls(self) -> list[str]:
        """The plugin calls under way: the one holding the loop is among them."""
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
