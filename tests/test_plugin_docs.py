"""The complete example in docs/plugins.md works as written: its plugin, run by its test, with
the SDK's pytest plugin (the `turnkeeper_table` fixture) as an author would have it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


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
