"""Who may give a command (R16): the narrator anything, an observer nothing, a player only
its own combatants' commands."""

from __future__ import annotations

from .. import commands as cmd
from .context import Ctx, reject

NARRATOR_ONLY = frozenset(
    {
        cmd.AddCombatant,
        cmd.RemoveCombatant,
        cmd.DefeatCombatant,
        cmd.ReviveCombatant,
        cmd.RevealCombatant,
        cmd.MarkSurprised,
        cmd.ReorderGroup,
        cmd.StartCombat,
        cmd.AnnounceTrigger,
        cmd.CloseWindow,
        cmd.ApplyCondition,
        cmd.RemoveCondition,
        cmd.Surprise,
        cmd.RecordOutcome,
        cmd.DisablePlugin,
        cmd.EnablePlugin,
        cmd.SetTurnTimer,
        cmd.Tick,
        cmd.Undo,
        cmd.EndCombat,
    }
)


def acted_on(command: cmd.Command) -> tuple[str, ...]:
    """The combatants a player's command acts for: each must be the player's own (R16)."""
    if isinstance(command, cmd.OrderTies):
        return command.combatants
    turn = getattr(command, "turn", None)
    if turn is not None:
        return (turn.combatant,)
    return (str(command.combatant),) if hasattr(command, "combatant") else ()


def authorize(ctx: Ctx, command: cmd.Command) -> None:
    """Refuse ``command`` unless the actor's role may give it for these combatants (R16)."""
    role = ctx.actor.role
    if role == "narrator":
        return
    if role == "observer":
        raise reject("forbidden", "observers may only read", "actor")
    if type(command) in NARRATOR_ONLY:
        raise reject("forbidden", "only the narrator may {command}", "actor", command=command.name)
    for combatant_id in acted_on(command):
        c = ctx.state.get(combatant_id)
        if c is None or c.controller is None or c.controller != ctx.actor.user:
            raise reject(
                "forbidden", "{id!r} is not yours to act for", "combatant", id=combatant_id
            )
