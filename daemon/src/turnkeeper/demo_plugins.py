"""The bundled ``dnd3e-ready`` plugin on seeded dice, for ``turnkeeper demo``.

The plugin rolls dice of its own (a caster's Concentration check, a readier's Spellcraft
check), from the system's generator unless it is given a source: R2 injects the dice source,
seedable for tests and demos. The demo's daemon loads this instance by import path in place of
the installed one (``--no-plugins dnd3e-ready --plugin dnd3e-ready=...``), so the goblin
shaman's Concentration roll, like every other die of the seeds' scenes, is the same on every
run.
"""

from __future__ import annotations

from turnkeeper_dnd3e_ready import Dnd3eReadyPlugin, __version__
from turnkeeper_engine import SeededDice

__all__ = ["DICE_SEED", "__version__", "dnd3e_ready"]

DICE_SEED = 7
"""The demo's seed for the plugin's dice: any fixed number makes the log repeat."""

dnd3e_ready = Dnd3eReadyPlugin(SeededDice(DICE_SEED))
"""The plugin the demo's daemon runs as ``dnd3e-ready``."""
