"""Node.js for the tests of the JavaScript parts: the client (sdk/js), the Foundry example and
the table view's browser tests. Each needs node and its npm packages; without them the test
fails, never skips, and says what to install."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SDK_JS = ROOT / "sdk" / "js"


def node(*packages: tuple[Path, str]) -> str:
    """The node program, once every ``(folder, package)`` is installed in ``folder``'s
    node_modules (``npm ci --prefix folder``)."""
    found = shutil.which("node")
    missing = [] if found is not None else ["node 20 or newer (apt-get install nodejs)"]
    for folder, package in packages:
        if not (folder / "node_modules" / package).is_dir():
            where = folder.relative_to(ROOT)
            missing.append(f"{package} in {where} (run: npm ci --prefix {where})")
    if missing:
        pytest.fail("these tests need: " + "; ".join(missing), pytrace=False)
    assert found is not None
    return found


def run_node_tests(argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float) -> None:
    """Run node's test runner; a failure or a hang fails the test with node's output."""
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node's tests took over {timeout:g} s:\n{e.stdout!r}\n{e.stderr!r}")
    assert done.returncode == 0, f"node's tests failed:\n{done.stdout}\n{done.stderr}"
