"""A well-behaved plugin: it records whose turn started, as an outcome."""

from __future__ import annotations

from turnkeeper_engine import commands as cmd
from turnkeeper_engine.model import Combatant
from turnkeeper_sdk import hookimpl

__version__ = "1.2.3"


@hookimpl
def on_turn_start(combatant: Combatant) -> cmd.Command:
    return cmd.RecordOutcome("turn_seen", f"{combatant.id}'s turn", combatant=combatant.id)
