"""The example plugin installs and loads the way a community author's plugin would: pip builds
its folder into a directory of its own, and a fresh interpreter finds it through its entry
point, with nothing of it imported from this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "plugins" / "example"

RUN = """
import json
from importlib.metadata import entry_points

from turnkeeper_engine import commands, events
from turnkeeper_sdk.plugins import PluginHost
from turnkeeper_sdk.testing import Table

host = PluginHost()
host.load_entry_points()
info = host.plugins["example"]
(point,) = entry_points(group="turnkeeper.plugins", name="example")
plugin = point.load()

table = Table("dnd3e", plugins={"example": plugin})
table.add("fighter")
table.add("orc")
table.add("spy", hidden=True)
table.start()
table.do(commands.ApplyCondition("fighter", "inspired", rounds=2))
for _ in range(3):
    table.end_turn()
print(json.dumps({
    "file": plugin.__file__,
    "version": info.version,
    "hooks": list(info.hooks),
    "provides": list(info.provides),
    "failed": [f.name for f in host.failures],
    "outcomes": [[e.kind, e.text, dict(e.values)] for e in table.of(events.OutcomeRecorded)],
    "conditions": [k.type for k in table.state.conditions],
    "problems": [what for what, _ in table.problems],
}))
"""


def test_example_plugin_installs_and_loads_like_a_community_plugin(tmp_path: Path) -> None:
    source, site = tmp_path / "example", tmp_path / "site"
    # Built from a copy: pip builds in the source tree and would leave build/ and egg-info here.
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            # Offline: the SDK is installed already, and setuptools is the one at hand.
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [sys.executable, "-c", RUN], check=True, capture_output=True, text=True, env=env, timeout=60
    )
    found = json.loads(ran.stdout)

    assert Path(found["file"]).is_relative_to(site)
    assert found["version"] == "0.1.0"
    assert found["hooks"] == ["turnkeeper_condition_types", "on_round_start"]
    assert found["provides"] == ["condition:inspired"]
    assert found["failed"] == []
    assert found["outcomes"] == [
        ["round_banner", "Round 1 begins with 2 combatants.", {"round": 1, "combatants": 2}],
        ["round_banner", "Round 2 begins with 2 combatants.", {"round": 2, "combatants": 2}],
    ]
    assert found["conditions"] == ["inspired"]
    assert found["problems"] == []
