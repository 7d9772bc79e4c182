"""docs/plugins.md documents every hook with its exact signature, and nothing else.

The hook reference is what plugin authors code against: a hook added, renamed or given a new
argument without its documentation fails here.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from turnkeeper_sdk import hookspecs

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
HEADING = re.compile(r"^#### `(\w+)\((.*)\) -> (.+)`$")


def _documented() -> dict[str, tuple[str, str, str]]:
    """hook name → (parameters, return annotation, the section's text)."""
    found: dict[str, tuple[str, str, str]] = {}
    current: str | None = None
    for line in DOC.read_text().splitlines():
        heading = HEADING.match(line)
        if heading:
            current = heading.group(1)
            assert current not in found, f"{current} is documented twice"
            found[current] = (heading.group(2), heading.group(3), "")
        elif line.startswith("#"):
            current = None
        elif current is not None:
            params, returns, text = found[current]
            found[current] = (params, returns, text + line + "\n")
    return found


def _signature(name: str) -> tuple[str, str]:
    sig = inspect.signature(getattr(hookspecs, name))
    params = ", ".join(f"{p}: {v.annotation}" for p, v in sig.parameters.items())
    return params, str(sig.return_annotation)


def test_every_hook_is_documented_and_every_documented_hook_exists() -> None:
    documented = _documented()
    assert sorted(documented) == sorted(hookspecs.HOOKS)


def test_every_hook_is_documented_with_its_exact_signature() -> None:
    for name, (params, returns, _) in _documented().items():
        assert (params, returns) == _signature(name), f"{name}: docs/plugins.md is out of date"


def test_every_hook_documents_each_parameter_its_return_rule_and_version() -> None:
    for name, (_, _, text) in _documented().items():
        for param in inspect.signature(getattr(hookspecs, name)).parameters:
            assert f"- `{param}`:" in text, f"{name}: parameter {param} is not described"
        assert "- Returns:" in text, f"{name}: no return rule"
        assert re.search(r"Added in \d+\.\d+\.", text), f"{name}: no version"


def test_hook_specs_follow_one_docstring_layout() -> None:
    """Summary line, each parameter, the return rule, versionadded (the pytest layout)."""
    for name in hookspecs.HOOKS:
        spec = getattr(hookspecs, name)
        doc = inspect.getdoc(spec) or ""
        assert doc.splitlines()[0].endswith("."), f"{name}: no summary line"
        for param in inspect.signature(spec).parameters:
            assert f":param {param}:" in doc, f"{name}: {param} undocumented"
        assert ":return:" in doc, name
        assert ".. versionadded::" in doc, name


def test_hooks_lists_every_specification_in_the_order_they_are_defined() -> None:
    """HOOKS drives loading, listing and misspelling checks: a spec left out of it would be
    reported as a misspelled hook when a plugin implements it."""
    marker = f"{hookspecs.PROJECT}_spec"
    specs = [name for name, value in vars(hookspecs).items() if hasattr(value, marker)]
    assert specs == list(hookspecs.HOOKS)
