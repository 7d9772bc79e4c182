"""The bundled rulesets; ``turnkeeper_engine.rulebook`` gathers them into a rule book."""

from __future__ import annotations

from .base import ClaimOrder, Ruleset
from .dnd3e import DND3E, DnD3e
from .marvel import MARVEL, Marvel

__all__ = ["DND3E", "MARVEL", "ClaimOrder", "DnD3e", "Marvel", "Ruleset"]
