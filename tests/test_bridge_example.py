"""The Foundry VTT example module of docs/bridges.md (docs/examples/foundry-turnkeeper).

Its manifest is checked here. Its behaviour is checked by its own Node test
(test/bridge.test.js), run here against a live daemon with its WebSocket endpoint, on a copy of
the module folder into which ``node build.mjs`` has put the JavaScript client, as a user would
install it. The Foundry side of that test is a stand-in; the daemon, the socket and the client
are real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from daemon import running
from node import node, run_node_tests

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "foundry-turnkeeper"
JS = ROOT / "sdk" / "js"
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


def test_the_example_has_a_foundry_v12_module_manifest() -> None:
    manifest = json.loads((EXAMPLE / "module.json").read_text(encoding="utf-8"))
    # Foundry installs a module into Data/modules/<id>/: the folder must be named by its id.
    assert manifest["id"] == EXAMPLE.name
    for key in ("title", "description", "version"):
        assert isinstance(manifest[key], str)
        assert manifest[key].strip()
    compatibility = manifest["compatibility"]
    assert float(compatibility["minimum"]) >= 12
    assert float(compatibility["verified"]) >= float(compatibility["minimum"])
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


@pytest.mark.parametrize("foundry", ["12", "13"])
def test_the_example_module_drives_and_follows_a_live_daemon(tmp_path: Path, foundry: str) -> None:
    """``foundry``: the Foundry version the stand-in plays (v13 renamed the chat card's hook)."""
    program = node((JS, "@msgpack/msgpack"))
    module = tmp_path / "modules" / EXAMPLE.name
    shutil.copytree(EXAMPLE, module, ignore=shutil.ignore_patterns("lib", "node_modules"))
    built = subprocess.run(
        [program, "build.mjs", str(JS)],
        cwd=module,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert built.returncode == 0, f"build.mjs failed:\n{built.stdout}\n{built.stderr}"

    with running(tmp_path, ws=True) as d:
        env = {
            **os.environ,
            "TURNKEEPER_TEST_WS_URL": f"ws://127.0.0.1:{d.ws_port}/ws",
            "TURNKEEPER_TEST_BRIDGE_TOKEN": d.token("bridge", "--narrator"),
            "TURNKEEPER_TEST_OBSERVER_TOKEN": d.token("observer"),
            "TURNKEEPER_TEST_NARRATOR_TOKEN": d.token("narrator"),
            "TURNKEEPER_TEST_FOUNDRY": foundry,
        }
        argv = [program, "--experimental-websocket", "--test", "test/"]
        run_node_tests(argv, module, env, NODE_TIMEOUT)
