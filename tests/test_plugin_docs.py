"""The complete example in docs/plugins.md works as written: its plugin, run by its test, with
the SDK's pytest plugin (the `turnkeeper_table` fixture) as an author would have it; and the
README's plugins section names every plugin the daemon loads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from turnkeeper.loader import PluginChoice, load

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugins.md"
README = ROOT / "README.md"
COUNTS = {3: "Three", 4: "Four", 5: "Five", 6: "Six"}


def test_docs_example_plugin_passes_its_own_test_with_the_sdk_pytest_plugin(
    tmp_path: Path,
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    plugin = next(b for b in blocks if "@hookimpl" in b)
    test = next(b for b in blocks if "def test_" in b)
    (tmp_path / "danger_sense.py").write_text(plugin)
    (tmp_path / "test_danger_sense.py").write_text(test)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_danger_sense.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_readme_names_every_plugin_the_daemon_loads_and_counts_them() -> None:
    """What `turnkeeper plugins` lists with no flags is what the README says comes with it."""
    loaded = sorted(load(PluginChoice(), report=lambda what, **details: None).plugins)
    text = README.read_text()
    start = text.index("## Plugins\n")
    section = text[start : text.index("\n## ", start + 1)]
    for name in loaded:
        assert f"`{name}`" in section, name
    assert section.split("\n\n")[1].startswith(COUNTS[len(loaded)] + " plugins"), loaded
