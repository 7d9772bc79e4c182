"""The JavaScript client (sdk/js) against a live daemon, through Node's test runner.

The daemon runs here with its WebSocket endpoint; node runs sdk/js/test/ with the endpoint's URL
and tokens in its environment. A node test that needs the daemon killed and restarted asks for it
on a control socket this side serves (one JSON line each way, see sdk/js/test-support/live.js):
the daemon is this process's child, so only this side can stop, kill and restart it.
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon import CALL_TIMEOUT, Daemon, running
from node import node, run_node_tests

JS = Path(__file__).resolve().parent.parent / "sdk" / "js"
NODE_TIMEOUT = 300.0
"""Seconds the whole node run may take: it needs well under a minute; a hang fails in bounded
time, with node's output so far."""


def _tokens(daemon: Daemon, *args: str) -> list[str]:
    """``turnkeeper token ARGS`` on the daemon's data directory; the lines it prints."""
    argv = [sys.executable, "-m", "turnkeeper.cli", "token", "--data-dir", str(daemon.data_dir)]
    done = subprocess.run(
        [*argv, *args], capture_output=True, text=True, check=True, timeout=CALL_TIMEOUT
    )
    return done.stdout.splitlines()


def _restart(daemon: Daemon, while_down: list[tuple[str, dict[str, Any]]]) -> None:
    """SIGKILL, then start again on the same ports; ``while_down``'s commands run first on the
    Unix socket with the WebSocket endpoint closed, so the JS client misses their events."""
    daemon.kill()
    port = daemon.ws_port
    try:
        if while_down:
            daemon.ws_port = None
            daemon.start()
            with daemon.client() as c:
                for method, params in while_down:
                    c.call(method, **params)
            daemon.stop()
    finally:
        # Back with its endpoint whatever happened, so the tests after this one still run.
        daemon.ws_port = port
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.kill()
        daemon.start()


def _act(daemon: Daemon, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    process = daemon.process
    assert process is not None
    if op == "freeze":
        process.send_signal(signal.SIGSTOP)
    elif op == "thaw":
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
    elif op == "restart":
        _restart(daemon, [(m, p) for m, p in request.get("while_down", [])])
    elif op == "token":
        # ``Daemon.token`` gives only the secret; revoking needs the id too.
        first, secret = _tokens(daemon, "add", *request["args"])[:2]
        return {"id": first.split()[0], "secret": secret}
    elif op == "revoke":
        _tokens(daemon, "revoke", request["id"])
    else:
        raise ValueError(f"no operation {op!r}")
    return {}


@contextmanager
def _control(path: Path, daemon: Daemon) -> Iterator[None]:
    """Serve the control socket at ``path`` while the block runs; one request at a time."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            try:
                reply = {"ok": True, **_act(daemon, json.loads(self.rfile.readline()))}
            except Exception as e:  # reported to the node test that asked, which fails on it
                reply = {"ok": False, "error": repr(e)}
            self.wfile.write(json.dumps(reply).encode() + b"\n")

    with socketserver.UnixStreamServer(str(path), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield
        finally:
            server.shutdown()
            thread.join(CALL_TIMEOUT)


def _node() -> str:
    return node(*((JS, package) for package in ("@msgpack/msgpack", "typescript")))


def test_the_js_client_passes_its_node_tests_against_a_live_daemon(tmp_path: Path) -> None:
    program = _node()
    control = tmp_path / "control.sock"
    with running(tmp_path, ws=True) as d, _control(control, d):
        env = {
            **os.environ,
            "TURNKEEPER_TEST_WS_URL": f"ws://127.0.0.1:{d.ws_port}/ws",
            "TURNKEEPER_TEST_NARRATOR_TOKEN": d.token("narrator"),
            "TURNKEEPER_TEST_PLAYER_TOKEN": d.token("player", "--user", "alice"),
            "TURNKEEPER_TEST_CONTROL": str(control),
        }
        # One test file at a time: the reconnect tests kill the daemon the others talk to.
        argv = [program, "--experimental-websocket", "--test", "--test-concurrency=1", "test/"]
        run_node_tests(argv, JS, env, NODE_TIMEOUT)


def test_the_js_client_type_checks_against_its_jsdoc_and_declarations() -> None:
    """tsc over sdk/js (tsconfig.json): the client's JS against its JSDoc, the tests against
    src/index.d.ts, so the declarations say what the client does."""
    tsc = JS / "node_modules" / "typescript" / "bin" / "tsc"
    done = subprocess.run(
        [_node(), str(tsc), "-p", str(JS)], capture_output=True, text=True, timeout=NODE_TIMEOUT
    )
    assert done.returncode == 0, f"tsc found errors:\n{done.stdout}\n{done.stderr}"
