"""Which plugins a daemon loads, and where their problems are told.

Installed plugins come from the ``turnkeeper.plugins`` entry-point group, filtered by the allow
and block lists; ``--plugin`` adds one by import path, without installing it (for plugin
development and tests). A plugin that fails to import or register is named in the log and in
``failed``, and skipped: the daemon starts without it. ``serve`` and ``turnkeeper plugins`` load
through here, so what the listing shows is what the daemon runs.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

import structlog

from turnkeeper_engine import BUNDLED_RULES
from turnkeeper_sdk.plugins import DEFAULT_BUDGET, PluginHost, Report

log = structlog.get_logger("turnkeeper.plugins")

_PATH = re.compile(
    r"(?:(?P<name>[^=\s]+)=)?(?P<module>[A-Za-z_][\w.]*)(?::(?P<attr>[A-Za-z_]\w*))?"
)


@dataclass(frozen=True, slots=True)
class PluginPath:
    """A plugin named by import path: ``[NAME=]MODULE[:ATTR]``."""

    name: str
    module: str
    attr: str | None = None

    @classmethod
    def parse(cls, spec: str) -> PluginPath:
        """Read ``NAME=MODULE[:ATTR]`` or ``MODULE[:ATTR]``; the name defaults to the module's
        last part. Raises ValueError for anything else."""
        found = _PATH.fullmatch(spec.strip())
        if found is None or found["module"].endswith(".") or ".." in found["module"]:
            raise ValueError(f"expected [NAME=]MODULE[:ATTR], e.g. mine=my_plugin:PLUGIN: {spec!r}")
        module = found["module"]
        return cls(found["name"] or module.rpartition(".")[2], module, found["attr"])


@dataclass(frozen=True, slots=True)
class PluginChoice:
    """What ``serve`` was told to load."""

    allow: frozenset[str] | None = None
    """If set, only these installed plugins load."""
    block: frozenset[str] = frozenset()
    """Installed plugins that never load."""
    paths: tuple[PluginPath, ...] = ()
    """Plugins loaded by import path, whatever the lists say: they are named explicitly."""
    budget: float = DEFAULT_BUDGET
    """Seconds one hook implementation may take."""


def log_report(what: str, **details: Any) -> None:
    """The plugin host's problems, as warnings of the ``turnkeeper.plugins`` logger."""
    log.warning(what, **details)


def load(choice: PluginChoice, report: Report = log_report) -> PluginHost:
    """A plugin host with every plugin ``choice`` names loaded (or listed as failed or
    skipped). Their rule book starts from the bundled rules: the daemon plays marvel and
    dnd3e whichever plugins load, and the ``rulesets`` plugin only lists them."""
    host = PluginHost(
        budget=choice.budget,
        allow=choice.allow,
        block=choice.block,
        report=report,
        rules=BUNDLED_RULES,
    )
    host.load_entry_points()
    for path in choice.paths:
        _load_path(host, path)
    named = {p.name for p in choice.paths}
    seen = set(host.plugins) | {f.name for f in (*host.failures, *host.skipped)}
    for name in sorted((choice.allow or frozenset()) - seen - named):
        host.fail(name, "in the allow list but not installed")
    return host


def _load_path(host: PluginHost, path: PluginPath) -> None:
    try:
        module = importlib.import_module(path.module)
        plugin = module if path.attr is None else getattr(module, path.attr)
    except Exception as e:  # a broken plugin is named and skipped, like an entry point
        host.fail(path.name, f"import failed: {type(e).__name__}: {e}")
        return
    host.register(plugin, path.name, str(getattr(module, "__version__", "")))


def announce(host: PluginHost) -> None:
    """One log line per plugin loaded or skipped (failures were reported as they happened)."""
    for info in host.plugins.values():
        log.info(
            "plugin_loaded",
            plugin=info.name,
            version=info.version,
            hooks=list(info.hooks),
            provides=list(info.provides),
        )
    for skipped in host.skipped:
        log.info("plugin_skipped", plugin=skipped.name, reason=skipped.error)
