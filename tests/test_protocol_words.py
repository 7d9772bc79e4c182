"""What a client author reads is written for people: ``hello`` lists every method with a
summary that is a sentence (never a Python repr of the command's fields, no two alike), and
protocol.md has no Python repr and no paragraph cut off mid-sentence."""

from __future__ import annotations

import re
from pathlib import Path

from daemon import Client, running
from turnkeeper_engine import BUNDLED_RULES
from turnkeeper_engine import commands as cmd

ROOT = Path(__file__).resolve().parent.parent
REPR = re.compile(r"'str'|'int'|\bEllipsis\b|\bNoneType\b|<class |\btyping\.|\btuple\[")
"""What a Python type's repr looks like."""
GENERATED = re.compile(r"^[A-Z]\w*\(\w+: ")
"""The docstring a dataclass without one gets: ``RemoveCombatant(combatant: 'str')``."""


def _sentence(summary: str) -> bool:
    # A ruleset's name may open it in lower case ("dnd3e: spend the full round...").
    opening = summary.split(":")[0]
    return (summary[0].isupper() or opening in BUNDLED_RULES.rulesets) and summary.endswith(".")


def test_hello_gives_every_method_a_sentence_of_its_own(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        client = Client.unix(d.socket)
        methods = client.hello()["methods"]
        client.close()
    names = [m["name"] for m in methods]
    assert set(cmd.COMMANDS) <= set(names)
    summaries = [m["summary"] for m in methods]
    for name, summary in zip(names, summaries, strict=True):
        assert not REPR.search(summary), (name, summary)
        assert not GENERATED.search(summary), (name, summary)
        assert _sentence(summary), (name, summary)
        assert len(summary.split()) >= 4, (name, summary)
        assert "``" not in summary, (name, summary)
    assert len(set(summaries)) == len(summaries)


def _paragraphs(text: str) -> list[list[str]]:
    """The prose paragraphs of a markdown page: no code, table, heading or list."""
    found: list[list[str]] = []
    current: list[str] = []
    fenced = False
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            fenced = not fenced
            current = []
            continue
        if fenced:
            continue
        if line.strip():
            current.append(line)
            continue
        if current and not re.match(r"[|#>*-]|\d+\. ", current[0]):
            found.append(current)
        current = []
    return found


def test_protocol_md_has_no_python_repr_and_no_cut_off_paragraph() -> None:
    page = (ROOT / "protocol.md").read_text()
    assert not [line for line in page.splitlines() if REPR.search(line.strip("| "))]
    cut = [p[-1] for p in _paragraphs(page) if not p[-1].rstrip().endswith((".", ":", ")"))]
    assert not cut, cut
