"""What every rule works with: the working state of one command (``Ctx``), refusals (``reject``)
and the limits on what a command may put into a combat."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import events as ev
from ..dice import DiceSource
from ..errors import Arg, Rejected
from ..evolve import evolve
from ..model import Actor, OptionValue, State
from ..rulebook import RuleBook
from ..rulesets import Ruleset

MAX_REROLLS = 10
"""Edges or troubles on one check: more has no meaning at a table and would only cost rolls."""
MAX_SECONDS = 86_400.0
"""Longest time option (turn limit, warning, window wait): a day; also refuses NaN and inf."""
MIN_TURN_SECONDS = 1.0
"""Shortest turn time limit (R13): less is no time for a person to act, and a limit of 0 would
expire each turn as it starts, so the clock would record events without end. A window wait or a
warning needs no such floor: the clock closes a window once, and only a command or a turn start
(bounded by this) opens one."""
MAX_CONDITION_ROUNDS = 1000
"""Longest condition duration accepted, in turn boundaries."""
MAX_COMBATANTS = 500
"""Combatants in one combat, removed ones included: a battle of hundreds is still a table's
game. What they may carry in all is bounded by ``MAX_VIEW_BYTES``."""
MAX_NAME = 128
"""Longest id, name, tag or zone: they label things, they are not documents."""
MAX_ITEMS = 32
"""Most tags, targets or predicate terms in one list: enough for any table, and a bound on what
one command can make every later event and view carry."""
MAX_NUMBER = 1_000_000
"""Largest initiative modifier, Dexterity or named number, either sign: far beyond any rules,
well inside every integer encoding."""
MAX_TEXT = 2000
"""Longest free text (names, descriptions, triggers) the engine keeps."""
MAX_SECRETS = 1000
"""Hidden stretches one combat records (``State.secrets``): each hidden addition and each
reveal may start one, and the record is kept for good (R16), so a narrator adding and undoing
hidden combatants must not grow it, and every later read of the log, without bound. Twice
``MAX_COMBATANTS``; an undone reveal may start one more, at most ``UNDO_DEPTH`` of them."""
MAX_VIEW_BYTES = 960 * 1024
"""Largest a combat may grow, counted as its whole view encoded (the narrator's: every other
role's is a part of it). The limits above bound one item each, and their product is many
megabytes; this bounds the sum, so a combat's view always fits in one protocol message
(1 MiB) with the response around it. Commands that add content are held to it with room left
for play (``PLAY_BYTES``, ``PLAY_IDS``, ``PLAY_FIXED``, ``PLAY_PLUGINS``), so the others never
need refusing: a combat full of content can still be played to its end."""
PLAY_BYTES = 1280
"""Room kept per combatant for what play adds besides its ids: its check once rolled (the dice,
ten rerolls, who supplied them) and the numbers of its hold and of its claim in a window."""
PLAY_IDS = 9
"""Room kept per combatant, in ids as long as the combat's longest: its place in the order,
its hold and the combatant the hold names, its entries in a window's ``offered``, ``passes``
and ``sequence``, its claim, and its entries in the view's ``reached`` and ``bonus``."""
PLAY_FIXED = 4096
"""Room kept once per combat: the turn in progress and a turn start's window."""
MAX_DISABLED_PLUGINS = 32
"""Plugins one combat may have disabled at once: far more than a daemon loads (it bundles
four). Room is kept for all of them (``PLAY_PLUGINS``) rather than holding ``disable_plugin`` to
``MAX_VIEW_BYTES``: it is how the daemon stops a failing plugin, which a full combat must not
refuse."""
PLAY_PLUGINS = MAX_DISABLED_PLUGINS * (4 * MAX_NAME + 3) + 2
"""Room kept once per combat for ``MAX_DISABLED_PLUGINS`` names in ``disabled_plugins``, each
as long as allowed in four-byte characters with its 3-byte header, and the 2 bytes more the
list's header then takes."""


@dataclass
class Ctx:
    """One command being decided: the state as its events so far left it, and what it is
    decided with (time, actor, dice, the combat's ruleset and the whole rule book)."""

    state: State
    now: float
    actor: Actor
    dice: DiceSource
    rules: Ruleset
    book: RuleBook
    events: list[ev.Event] = field(default_factory=list)
    states: list[State] = field(default_factory=list)
    """The states the events went through, from the one decided on (``states[0]``, given by
    whoever makes the ``Ctx``): ``states[i + 1]`` after ``events[i]``. The pipeline keeps
    them rather than fold the events again."""

    def emit(self, event: ev.Event) -> None:
        """Record ``event`` and fold it at once, so the next step sees its effect."""
        self.events.append(event)
        self.state = evolve(self.state, event)
        self.states.append(self.state)

    @property
    def opts(self) -> dict[str, OptionValue]:
        """The combat's options by name."""
        return dict(self.state.options)


def reject(code: str, template: str, field_name: str = "", **args: Arg) -> Rejected:
    """A refusal; ``template`` is a string literal, its pieces passed by name (see Rejected)."""
    return Rejected(code, template, field_name, **args)
