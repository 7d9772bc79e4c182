"""What plugin and client authors import, without the daemon.

For now this is the engine's public surface that third parties build on: the ruleset interface
and registry (to add a game system), condition types, the command and event values, and the
role-filtered views. The wire codec, hook specifications and client arrive with later issues.
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

__all__ = [
    "CONDITION_TYPES",
    "RULESETS",
    "Actor",
    "ConditionType",
    "RuleError",
    "Ruleset",
    "State",
    "View",
    "commands",
    "events",
    "view",
    "visible",
]
