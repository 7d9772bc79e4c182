"""An async plugin that sleeps far past any budget the tests give it: it is cancelled."""

from __future__ import annotations

import anyio

from turnkeeper_sdk import hookimpl


@hookimpl
async def on_turn_start() -> None:
    await anyio.sleep(5)
