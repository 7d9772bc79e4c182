"""Before the combat starts, every combatant tagged ``unaware`` is surprised (marvel, R8)."""

from __future__ import annotations

from turnkeeper_engine import commands as cmd
from turnkeeper_sdk import CombatView, hookimpl


@hookimpl
def before_combat_start(combat: CombatView) -> list[cmd.Command]:
    return [cmd.MarkSurprised(c.id) for c in combat.active() if "unaware" in c.tags]
