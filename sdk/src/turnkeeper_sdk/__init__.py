"""What plugin, bot and client authors import, without the daemon.

- Plugins: :data:`hookimpl`, the hook specifications (:mod:`turnkeeper_sdk.hookspecs`),
  :class:`CheckAdjustment`, the read-only :class:`CombatView`, the engine's command and
  event values they return and receive, and :func:`outcome` for outcomes told in the table's
  language.
- Rulesets: the ruleset interface and registry (to add a game system), condition types.
- Clients: the wire codec (:mod:`turnkeeper_sdk.wire`) and the clients
  (:mod:`turnkeeper_sdk.aio`, :mod:`turnkeeper_sdk.client`).
- Bots: the :class:`Bot` base and :class:`SensibleBot`, a policy for any combatant.
- Tests: the in-process :class:`~turnkeeper_sdk.testing.Table` and its pytest fixture.
"""

from __future__ import annotations

from turnkeeper_engine import (
    CONDITION_TYPES,
    RULESETS,
    Actor,
    ConditionType,
    RuleError,
    Ruleset,
    State,
    View,
    commands,
    events,
    view,
    visible,
)

from .aio import AsyncClient, Subscription
from .bot import Bot
from .errors import CallError, CallTimeoutError, ConnectionLost, TooFarBehindError, TurnkeeperError
from .hookspecs import CheckAdjustment, hookimpl
from .policy import SensibleBot
from .views import CombatView, outcome

__all__ = [
    "CONDITION_TYPES",
    "RULESETS",
    "Actor",
    "AsyncClient",
    "Bot",
    "CallError",
    "CallTimeoutError",
    "CheckAdjustment",
    "CombatView",
    "ConditionType",
    "ConnectionLost",
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
