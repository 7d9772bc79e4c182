"""The Foundry VTT module of docs/bridges.md (docs/examples/foundry-turnkeeper).

Its manifest is checked here (its release zip in test_packaging.py). Its behaviour is checked by
its own Node test (test/bridge.test.js), run here against a live daemon with its WebSocket
endpoint, on a copy of the module folder into which ``python -m turnkeeper.foundry lib`` has
put the JavaScript client, as a user would install it. The Foundry side of that test is a
stand-in that models what the module relies on (test-support/foundry.js); the daemon, the socket
and the client are real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from daemon import running
from node import node, run_node_tests

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "foundry-turnkeeper"
NODE_TIMEOUT = 180.0
"""Seconds the node test may take: it needs a few; a hang fails in bounded time, with node's
output so far."""
BUILD_TIMEOUT = 60.0


def _keys(tree: dict[str, Any], prefix: str = "") -> set[str]:
    """A Foundry translation file's keys, nested ones as ``A.B.c``."""
    keys: set[str] = set()
    for key, value in tree.items():
        if isinstance(value, dict):
            keys |= _keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def test_the_module_has_a_foundry_v13_and_v14_manifest() -> None:
    manifest = json.loads((EXAMPLE / "module.json").read_text(encoding="utf-8"))
    # Foundry installs a module into Data/modules/<id>/: the folder must be named by its id.
    assert manifest["id"] == EXAMPLE.name
    for key in ("title", "description", "version"):
        assert isinstance(manifest[key], str)
        assert manifest[key].strip()
    # v13 brought combatant groups, which the module maps; v14 is the newest it is verified on.
    assert manifest["compatibility"] == {"minimum": "13", "verified": "14", "maximum": "14"}
    # Players' asks travel on the module's socket, which Foundry opens only when asked for.
    assert manifest["socket"] is True
    assert manifest["authors"]
    assert all(author["name"] for author in manifest["authors"])
    assert manifest["esmodules"]
    for script in manifest["esmodules"]:
        assert (EXAMPLE / script).is_file(), script
    languages = manifest["languages"]
    assert {language["lang"] for language in languages} == {"en", "pt-BR"}
    keys = [
        _keys(json.loads((EXAMPLE / language["path"]).read_text(encoding="utf-8")))
        for language in languages
    ]
    assert all(each == keys[0] for each in keys), "the translations have different keys"


def test_the_module_drives_and_follows_a_live_daemon(tmp_path: Path) -> None:
    program = node()
    module = tmp_path / "modules" / EXAMPLE.name
    shutil.copytree(EXAMPLE, module, ignore=shutil.ignore_patterns("lib", "node_modules"))
    built = subprocess.run(
        [sys.executable, "-m", "turnkeeper.foundry", "lib", str(module)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert built.returncode == 0, f"the build failed:\n{built.stdout}\n{built.stderr}"

    with running(tmp_path, ws=True) as d:
        env = {
            **os.environ,
            "TURNKEEPER_TEST_WS_URL": f"ws://127.0.0.1:{d.ws_port}/ws",
            "TURNKEEPER_TEST_BRIDGE_TOKEN": d.token("bridge", "--narrator"),
            "TURNKEEPER_TEST_OBSERVER_TOKEN": d.token("observer"),
            "TURNKEEPER_TEST_NARRATOR_TOKEN": d.token("narrator"),
        }
        argv = [program, "--experimental-websocket", "--test", "test/"]
        run_node_tests(argv, module, env, NODE_TIMEOUT)
