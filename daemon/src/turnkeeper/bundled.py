"""The daemon's own rulesets, registered the way any third party's are: a plugin module named in
the ``turnkeeper.plugins`` entry-point group (``rulesets``, in daemon/pyproject.toml).

The engine registers marvel and dnd3e itself, so it runs without any plugin host; this plugin
hands over those very objects, which the host accepts as already registered. It makes them show
in ``list_plugins`` like any other ruleset, and leaves the loading path nothing special to do.
"""

from __future__ import annotations

from turnkeeper_engine.rulesets import DND3E, MARVEL, Ruleset
from turnkeeper_sdk import hookimpl


@hookimpl
def turnkeeper_rulesets() -> list[Ruleset]:
    """Marvel Multiverse and the D&D 3e SRD special initiative actions."""
    return [MARVEL, DND3E]
