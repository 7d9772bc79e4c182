"""The bundled rulesets and the registry third parties add theirs to."""

from __future__ import annotations

from ..registry import Registry
from .base import Ruleset
from .dnd3e import DND3E, DnD3e
from .marvel import MARVEL, Marvel

RULESETS: Registry[Ruleset] = Registry("ruleset")
RULESETS.register(MARVEL.name, MARVEL)
RULESETS.register(DND3E.name, DND3E)

__all__ = ["DND3E", "MARVEL", "RULESETS", "DnD3e", "Marvel", "Ruleset"]
