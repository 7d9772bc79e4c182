"""A plugin that raises at every turn start."""

from __future__ import annotations

from turnkeeper_sdk import hookimpl


@hookimpl
def on_turn_start() -> None:
    raise RuntimeError("this plugin fails on purpose")
