"""An async plugin that ignores its cancellation: its wait is shielded, so the host's
cancellation at the budget never reaches it, and the call would go on for an hour."""

from __future__ import annotations

import anyio

from turnkeeper_sdk import hookimpl

HANG_SECONDS = 3600


@hookimpl
async def on_turn_start() -> None:
    with anyio.CancelScope(shield=True):
        await anyio.sleep(HANG_SECONDS)
