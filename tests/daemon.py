"""A real daemon in a subprocess and a small synchronous client for the end-to-end tests.

These talk real msgpack over a real socket to a real process with a real SQLite file; the
in-memory Story helper is for the engine's unit tests only.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnkeeper.embedded import connect, spawn
from turnkeeper_sdk import wire
from turnkeeper_sdk.client import CallError
from turnkeeper_sdk.client import Client as SdkClient
from wsclient import WebSocketSocket

CALL_TIMEOUT = 20.0

__all__ = [
    "CallError",
    "Client",
    "Daemon",
    "create_many",
    "free_port",
    "on_store",
    "running",
    "stop_all",
    "two_daemons",
]


class Client(SdkClient):
    """The SDK's client, with the shortcuts these tests use."""

    @classmethod
    def tcp(cls, port: int) -> Client:  # type: ignore[override]
        return cls(socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT))

    @classmethod
    def ws(cls, port: int) -> Client:
        """A client over the daemon's WebSocket endpoint (``--ws`` or ``--http``)."""
        return cls(WebSocketSocket("127.0.0.1", port, timeout=CALL_TIMEOUT))  # type: ignore[arg-type]

    def send_raw(self, data: bytes) -> None:
        self.send(data)

    def hello(self, token: str | None = None) -> Any:  # type: ignore[override]
        return super().hello(token, name="tests")


class Daemon:
    """``turnkeeper serve`` as a subprocess on a temporary socket and data directory."""

    def __init__(
        self,
        root: Path,
        tcp_port: int | None = None,
        *extra: str,
        ws_port: int | None = None,
        page: bool = False,
    ) -> None:
        self.root = root
        self.extra = extra
        self.data_dir = root / "data"
        self.socket = root / "run" / "turnkeeper.sock"
        self.tcp_port = tcp_port
        self.ws_port = ws_port
        """The WebSocket endpoint's port; with ``page`` it also serves the table view."""
        self.page = page
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "daemon.log"

    def start(self) -> Daemon:
        extra = list(self.extra)
        if self.tcp_port is not None:
            extra += ["--tcp", f"127.0.0.1:{self.tcp_port}"]
        if self.ws_port is not None:
            extra += ["--http" if self.page else "--ws", f"127.0.0.1:{self.ws_port}"]
        with self.log.open("ab") as log:
            self.process = spawn(self.data_dir, self.socket, log, *extra)
        connect(self.process, self.socket).close()
        if self.ws_port is not None:
            _wait_for_port(self.ws_port)
        return self

    @property
    def http_port(self) -> int:
        """The port of the table view (and its WebSocket endpoint), with ``running(http=True)``."""
        assert self.page
        assert self.ws_port is not None
        return self.ws_port

    def client(self) -> Client:
        c = Client.unix(self.socket)
        c.hello()
        return c

    def kill(self) -> None:
        """SIGKILL: no drain, no flush, no goodbye."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=CALL_TIMEOUT)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=CALL_TIMEOUT)

    def where(self) -> list[str]:
        """Where the ``token`` and ``table`` commands find this daemon's tokens: its data
        directory, and its PostgreSQL store if it has one (the tokens are there then)."""
        where = ["--data-dir", str(self.data_dir)]
        if "--store" in self.extra:
            at = self.extra.index("--store")
            where += self.extra[at : at + 2]
        return where

    def token(self, *args: str) -> str:
        """``turnkeeper token add ...``; returns the secret."""
        done = subprocess.run(
            [sys.executable, "-m", "turnkeeper.cli", "token", *self.where(), "add", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=CALL_TIMEOUT,
        )
        return done.stdout.splitlines()[1]


def on_store(root: Path, dsn: str, names: tuple[str, ...], *extra: str) -> list[Daemon]:
    """Daemons sharing the PostgreSQL database ``dsn``, started, each with its own data
    directory and socket under ``root / name``; ``extra`` flags for every one."""
    started = []
    for name in names:
        (root / name).mkdir()
        started.append(Daemon(root / name, None, "--store", dsn, *extra).start())
    return started


def stop_all(*daemons: Daemon) -> None:
    """Kill what still runs, a stopped (SIGSTOP) daemon too, and reap every process."""
    for d in daemons:
        if d.process is not None:
            if d.process.poll() is None:
                d.process.send_signal(signal.SIGCONT)
                d.process.kill()
            d.process.wait()


def _wait_for_port(port: int) -> None:
    """The Unix socket answers once the daemon listens everywhere; this is a cheap safeguard."""
    deadline = time.monotonic() + CALL_TIMEOUT
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(
    root: Path, tcp: bool = False, *extra: str, ws: bool = False, http: bool = False
) -> Iterator[Daemon]:
    """A daemon for the test's duration: ``tcp`` adds a TCP port, ``ws`` a WebSocket endpoint,
    ``http`` the endpoint with the table view (``d.ws_port`` either way)."""
    ws_port = free_port() if ws or http else None
    daemon = Daemon(root, free_port() if tcp else None, *extra, ws_port=ws_port, page=http)
    daemon.start()
    try:
        yield daemon
    finally:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


def two_daemons(tmp_path: Path, dsn: str, tcp: bool = False) -> tuple[Daemon, Daemon]:
    """Two daemons on one PostgreSQL database, each with its own data directory and socket
    (and TCP port, with ``tcp``); stop them with ``stop_all``."""
    started = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        port = free_port() if tcp else None
        started.append(Daemon(tmp_path / name, port, "--store", dsn).start())
    return started[0], started[1]


def create_many(gm: Client, ids: list[str]) -> None:
    """Create combats fast: every request sent at once, then every answer read."""
    first = 10_000
    gm.send_raw(
        b"".join(
            wire.pack(
                wire.Request(
                    first + i,
                    "create_combat",
                    {"request_id": f"make-{cid}", "combat_id": cid, "ruleset": "marvel"},
                )
            )
            for i, cid in enumerate(ids)
        )
    )
    for i in range(len(ids)):
        assert gm.response(first + i).error is None


def add_spidey(c: Client, combat: str = "bank") -> None:
    """A marvel combat ``combat`` with Spider-Man (``spidey``) in it, not started."""
    c.call("create_combat", request_id=f"{combat}-1", combat_id=combat, ruleset="marvel")
    c.call(
        "add_combatant",
        request_id=f"{combat}-2",
        combat=combat,
        id="spidey",
        display_name="Spider-Man",
    )
