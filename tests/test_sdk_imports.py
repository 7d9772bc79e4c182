"""The SDK's face is thin: a plugin importing the hook specifications does not load the async
client or the bots, and every public name is still importable from ``turnkeeper_sdk``."""

from __future__ import annotations

import subprocess
import sys

import turnkeeper_sdk

CLIENT_AND_BOTS = ("turnkeeper_sdk.aio", "turnkeeper_sdk.bot", "turnkeeper_sdk.policy", "anyio")
"""Modules a plugin has no use for: the async client, the bots, and the I/O library under them."""
TIMEOUT = 60.0
"""Seconds a fresh interpreter may take to import the SDK: about a second here."""


def test_a_plugin_importing_the_hookspecs_loads_neither_client_nor_bots() -> None:
    script = (
        "import sys, turnkeeper_sdk.hookspecs, turnkeeper_sdk.views\n"
        f"print(sorted(m for m in {CLIENT_AND_BOTS!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=TIMEOUT
    )
    assert done.stdout.strip() == "[]"


def test_every_public_name_of_the_sdk_is_importable() -> None:
    missing = [
        name for name in turnkeeper_sdk.__all__ if getattr(turnkeeper_sdk, name, None) is None
    ]
    assert missing == []
    assert turnkeeper_sdk.AsyncClient.__module__ == "turnkeeper_sdk.aio"
