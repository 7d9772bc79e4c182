"""What the table and the daemon record beside the rules: outcomes plugins computed, and
plugins disabled or enabled in one combat."""

from __future__ import annotations

from .. import commands as cmd
from .. import events as ev
from .checks import check_figures, check_outcome_template, check_text, find_combatant
from .context import MAX_DISABLED_PLUGINS, MAX_NAME, Ctx, reject


def record_outcome(ctx: Ctx, c: cmd.RecordOutcome) -> None:
    """``record_outcome``: what a plugin computed, with its English template checked."""
    check_text(c.kind, "kind", limit=MAX_NAME)
    check_text(c.text, "text")
    if c.combatant is not None:
        find_combatant(ctx, c.combatant)
    check_figures(c.values, "values", MAX_NAME)
    if c.template or c.args:
        check_outcome_template(c.template, c.args, c.text)
    ctx.emit(ev.OutcomeRecorded(c.kind, c.text, c.combatant, c.values, c.template, c.args))


def disable_plugin(ctx: Ctx, c: cmd.DisablePlugin) -> None:
    """``disable_plugin``: a plugin is not called again in this combat."""
    check_text(c.plugin, "plugin", limit=MAX_NAME)
    check_text(c.reason, "reason", required=False)
    if c.plugin in ctx.state.disabled_plugins:
        raise reject(
            "invalid_value", "plugin {plugin!r} is already disabled", "plugin", plugin=c.plugin
        )
    if len(ctx.state.disabled_plugins) >= MAX_DISABLED_PLUGINS:
        raise reject(
            "too_many_plugins_disabled",
            "at most {limit} plugins may be disabled in one combat",
            "plugin",
            limit=MAX_DISABLED_PLUGINS,
        )
    ctx.emit(ev.PluginDisabled(c.plugin, c.reason))


def enable_plugin(ctx: Ctx, c: cmd.EnablePlugin) -> None:
    """``enable_plugin``: a disabled plugin is called again in this combat."""
    if c.plugin not in ctx.state.disabled_plugins:
        raise reject(
            "invalid_value", "plugin {plugin!r} is not disabled", "plugin", plugin=c.plugin
        )
    ctx.emit(ev.PluginEnabled(c.plugin))
