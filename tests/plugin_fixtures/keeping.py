"""An async plugin that keeps what it ties to its event loop from one call to the next: an
event made in its first call and waited on in every call (on another loop that raises), and a
task of its own that counts while no call runs. Each turn start records whether it found its
first call's loop, and how far the task has counted."""

from __future__ import annotations

import asyncio
import contextlib

from turnkeeper_engine import commands as cmd
from turnkeeper_engine.model import Combatant
from turnkeeper_sdk import hookimpl

_kept: dict[str, object] = {}
_ticks = [0]


async def _count() -> None:
    while True:
        await asyncio.sleep(0.01)
        _ticks[0] += 1


@hookimpl
async def on_turn_start(combatant: Combatant) -> cmd.Command:
    loop = asyncio.get_running_loop()
    if not _kept:
        _kept.update(loop=loop, event=asyncio.Event(), task=loop.create_task(_count()))
    event = _kept["event"]
    assert isinstance(event, asyncio.Event)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), 0.001)
    same = _kept["loop"] is loop
    return cmd.RecordOutcome("kept", f"{combatant.id}: same loop {same}, ticks {_ticks[0]}")
