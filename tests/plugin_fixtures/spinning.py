"""A plugin stuck in a synchronous busy loop at the first turn start: it never returns, and no
cancellation can reach it."""

from __future__ import annotations

from turnkeeper_sdk import hookimpl


@hookimpl
def on_turn_start() -> None:
    while True:
        pass
