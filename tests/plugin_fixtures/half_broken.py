"""A plugin whose ``on_turn_start`` always fails while its ``on_turn_end`` always succeeds: the
successes in between must not hide the failures."""

from __future__ import annotations

from turnkeeper_sdk import hookimpl


@hookimpl
def on_turn_start() -> None:
    raise RuntimeError("this hook fails on purpose, every time")


@hookimpl
def on_turn_end() -> None:
    return None
