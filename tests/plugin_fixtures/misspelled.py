"""A plugin whose author misspelled a hook: it is never called, and the listing says so."""

from __future__ import annotations

from turnkeeper_sdk import hookimpl


@hookimpl
def on_turn_strat() -> None:
    raise AssertionError("never called")


@hookimpl
def on_round_start() -> None:
    return None
