"""An example Turnkeeper plugin, packaged as a third party would package one.

- It registers a condition type, ``inspired``, that narrators and other plugins can apply
  (``apply_condition``) in any ruleset.
- At the start of each round it records a banner (an ``outcome_recorded`` event of kind
  ``round_banner``) with the round's number and how many combatants are in the fight. Its text
  is a template with named arguments (``outcome``), so a daemon whose catalogues have it tells
  the banner in the table's language.

A plugin is a module (like this one) or an object whose functions carry ``@hookimpl`` and are
named after the hooks in ``turnkeeper_sdk.hookspecs``. Each takes only the arguments it needs.
"""

from __future__ import annotations

from turnkeeper_engine import ConditionType
from turnkeeper_engine.commands import RecordOutcome
from turnkeeper_sdk.hookspecs import hookimpl
from turnkeeper_sdk.views import CombatView, outcome

__version__ = "0.1.0"

INSPIRED = ConditionType(
    "inspired",
    "Inspired by a rousing speech or a heroic deed; the table decides what it grants.",
)


@hookimpl
def turnkeeper_condition_types() -> list[ConditionType]:
    """Called once when the plugin loads: the condition types it adds."""
    return [INSPIRED]


@hookimpl
def on_round_start(combat: CombatView, round: int) -> RecordOutcome:
    """Record a banner for the round. Round 0 is the marvel bonus round."""
    # Hidden combatants are the narrator's secret (R16): a banner every player sees must not
    # count them.
    present = sum(1 for c in combat.active() if not c.hidden)
    values = (("round", round), ("combatants", present))
    # A whole sentence for each case: a translation cannot be put together from pieces.
    if round == 0 and present == 1:
        return outcome(
            "round_banner", "The bonus round begins with {n} combatant.", None, values, n=present
        )
    if round == 0:
        return outcome(
            "round_banner", "The bonus round begins with {n} combatants.", None, values, n=present
        )
    if present == 1:
        return outcome(
            "round_banner",
            "Round {round} begins with {n} combatant.",
            None,
            values,
            round=round,
            n=present,
        )
    return outcome(
        "round_banner",
        "Round {round} begins with {n} combatants.",
        None,
        values,
        round=round,
        n=present,
    )
