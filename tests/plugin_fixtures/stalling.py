"""A plugin that holds the event loop far longer than the watchdog allows (``time.sleep``)."""

from __future__ import annotations

import time

from turnkeeper_sdk import hookimpl

STALL_SECONDS = 2.5


@hookimpl
def on_turn_start() -> None:
    time.sleep(STALL_SECONDS)
