"""Turnkeeper's rules engine: pure, with no I/O.

``decide(state, command, now)`` answers a command with events or a ``RuleError``;
``evolve(state, event)`` folds an event into the state. ``pipeline`` is the one write path every
host takes (hooks, decide, fold, commit, publish); ``Engine`` runs it for callers that keep one
combat in memory. Rulesets and condition types come in a ``RuleBook`` the caller passes
(``BUNDLED_RULES``: the ones Turnkeeper ships), and dice in a ``DiceSource``.
"""

from __future__ import annotations

from . import commands, events
from .decide import decide
from .dice import DiceSource, SeededDice, SystemDice, d616_display
from .engine import Engine
from .errors import RuleError
from .evolve import UNDO_DEPTH, evolve, fold
from .model import NARRATOR, Actor, State, next_deadline
from .plain import PlainError, from_plain, to_plain
from .rulebook import BUNDLED_RULES, ConditionType, NameTakenError, RuleBook
from .rulesets import ClaimOrder, Ruleset
from .views import View, view, visible

__version__ = "0.1.0"

__all__ = [
    "BUNDLED_RULES",
    "NARRATOR",
    "UNDO_DEPTH",
    "Actor",
    "ClaimOrder",
    "ConditionType",
    "DiceSource",
    "Engine",
    "NameTakenError",
    "PlainError",
    "RuleBook",
    "RuleError",
    "Ruleset",
    "SeededDice",
    "State",
    "SystemDice",
    "View",
    "commands",
    "d616_display",
    "decide",
    "events",
    "evolve",
    "fold",
    "from_plain",
    "next_deadline",
    "to_plain",
    "view",
    "visible",
]
