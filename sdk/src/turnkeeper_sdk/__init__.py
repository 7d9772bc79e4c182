"""What plugin, bot and client authors import, without the daemon.

- Plugins: :data:`hookimpl`, the hook specifications (:mod:`turnkeeper_sdk.hookspecs`),
  :class:`CheckAdjustment`, the read-only :class:`CombatView`, the engine's command and
  event values they return and receive, and :func:`outcome` for outcomes told in the table's
  language.
- Rulesets: the ruleset interface (to add a game system), condition types, and the
  :class:`RuleBook` that holds them (:data:`BUNDLED_RULES`: the ones Turnkeeper ships).
- Clients: the wire codec (:mod:`turnkeeper_sdk.wire`) and the clients
  (:mod:`turnkeeper_sdk.aio`, :mod:`turnkeeper_sdk.client`).
- Bots: the :class:`Bot` base and :class:`SensibleBot`, a policy for any combatant.
- Tests: the in-process :class:`~turnkeeper_sdk.testing.Table` and its pytest fixture.

The clients and the bots are imported when first named (``turnkeeper_sdk.AsyncClient``), so a
plugin importing :mod:`turnkeeper_sdk.hookspecs` does not load the async client and the bots.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from turnkeeper_engine import (
    BUNDLED_RULES,
    Actor,
    ConditionType,
    RuleBook,
    RuleError,
    Ruleset,
    State,
    View,
    commands,
    events,
    view,
    visible,
)

from .errors import CallError, CallTimeoutError, ConnectionLost, TooFarBehindError, TurnkeeperError
from .hookspecs import CheckAdjustment, hookimpl
from .views import CombatView, outcome

if TYPE_CHECKING:
    from .aio import AsyncClient, Subscription
    from .bot import Bot
    from .policy import SensibleBot

_LAZY = {
    "AsyncClient": ".aio",
    "Subscription": ".aio",
    "Bot": ".bot",
    "SensibleBot": ".policy",
}
"""Public names imported on first use, and the module each comes from."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # looked up once: the next use finds it here
    return value


__version__ = "0.1.0"

__all__ = [
    "BUNDLED_RULES",
    "Actor",
    "AsyncClient",
    "Bot",
    "CallError",
    "CallTimeoutError",
    "CheckAdjustment",
    "CombatView",
    "ConditionType",
    "ConnectionLost",
    "RuleBook",
    "RuleError",
    "Ruleset",
    "SensibleBot",
    "State",
    "Subscription",
    "TooFarBehindError",
    "TurnkeeperError",
    "View",
    "commands",
    "events",
    "hookimpl",
    "outcome",
    "view",
    "visible",
]
