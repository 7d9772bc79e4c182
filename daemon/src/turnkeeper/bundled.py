"""The daemon's own rulesets, listed the way any third party's are: a plugin module named in the
``turnkeeper.plugins`` entry-point group (``rulesets``, in daemon/pyproject.toml).

The daemon's rule book starts from the engine's ``BUNDLED_RULES`` (``loader.load``), so it plays
marvel and dnd3e whichever plugins load; this plugin hands over those very objects, which the
book already holds (adding the same item again changes nothing). It makes them show in
``list_plugins`` like any other ruleset.
"""

from __future__ import annotations

from turnkeeper_engine import BUNDLED_RULES, Ruleset
from turnkeeper_sdk import hookimpl


@hookimpl
def turnkeeper_rulesets() -> list[Ruleset]:
    """Marvel Multiverse and the D&D 3e SRD special initiative actions."""
    return list(BUNDLED_RULES.rulesets.values())
