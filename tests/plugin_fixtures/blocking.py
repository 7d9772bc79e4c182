"""A plugin that holds the event loop (``time.sleep``) well past the tests' budget."""

from __future__ import annotations

import time

from turnkeeper_sdk import hookimpl

BLOCK_SECONDS = 0.5


@hookimpl
def on_turn_start() -> None:
    time.sleep(BLOCK_SECONDS)
