"""docs/rules.md stays true to the tests: each ruling's section names every test of that
ruling, and every test it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "docs" / "rules.md"


def _tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "test_"
            ):
                names.add(node.name)
    return names


def _sections() -> dict[str, set[str]]:
    sections: dict[str, set[str]] = {}
    current = ""
    for line in RULES.read_text().splitlines():
        heading = re.match(r"## (R\d+|Seed examples)\b", line)
        if heading:
            current = heading.group(1)
        sections.setdefault(current, set()).update(re.findall(r"`(test_\w+)`", line))
    return sections


def test_every_ruling_test_is_named_in_its_section_of_rules_md() -> None:
    sections = _sections()
    for name in _tests():
        ruling = re.match(r"test_r(\d+)_", name)
        if ruling:
            section = f"R{ruling.group(1)}"
            assert name in sections.get(section, set()), f"{name} is not listed under {section}"
        elif name.startswith("test_seed_"):
            assert name in sections.get("Seed examples", set()), f"{name} is not listed"


def test_every_test_named_in_rules_md_exists() -> None:
    named = set().union(*_sections().values())
    assert named <= _tests(), f"rules.md names missing tests: {sorted(named - _tests())}"
