"""A plugin whose ``before_combat_start`` takes a minute (``time.sleep``): with a budget as long,
a ``start_combat`` waits for it inside the daemon."""

from __future__ import annotations

import time

from turnkeeper_sdk import hookimpl

DAWDLE_SECONDS = 60


@hookimpl
def before_combat_start() -> None:
    time.sleep(DAWDLE_SECONDS)
