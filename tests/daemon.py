"""A real daemon in a subprocess and a small synchronous client for the end-to-end tests.

These talk real msgpack over a real socket to a real process with a real SQLite file; the
in-memory Story helper is for the engine's unit tests only.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnkeeper.embedded import connect, spawn
from turnkeeper_sdk.client import CallError
from turnkeeper_sdk.client import Client as SdkClient

CALL_TIMEOUT = 20.0

__all__ = ["CallError", "Client", "Daemon", "free_port", "running"]


class Client(SdkClient):
    """The SDK's client, with the shortcuts these tests use."""

    @classmethod
    def tcp(cls, port: int) -> Client:  # type: ignore[override]
        return cls(socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT))

    def send_raw(self, data: bytes) -> None:
        self.send(data)

    def hello(self, token: str | None = None) -> Any:  # type: ignore[override]
        return super().hello(token, name="tests")


class Daemon:
    """``turnkeeper serve`` as a subprocess on a temporary socket and data directory."""

    def __init__(self, root: Path, tcp_port: int | None = None, *extra: str) -> None:
        self.root = root
        self.extra = extra
        self.data_dir = root / "data"
        self.socket = root / "run" / "turnkeeper.sock"
        self.tcp_port = tcp_port
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "daemon.log"

    def start(self) -> Daemon:
        extra = list(self.extra)
        if self.tcp_port is not None:
            extra += ["--tcp", f"127.0.0.1:{self.tcp_port}"]
        with self.log.open("ab") as log:
            self.process = spawn(self.data_dir, self.socket, log, *extra)
        connect(self.process, self.socket).close()
        return self

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

    def token(self, *args: str) -> str:
        """``turnkeeper token add ...``; returns the secret."""
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "turnkeeper.cli",
                "token",
                "--data-dir",
                str(self.data_dir),
                "add",
                *args,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=CALL_TIMEOUT,
        )
        return done.stdout.splitlines()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(root: Path, tcp: bool = False, *extra: str) -> Iterator[Daemon]:
    daemon = Daemon(root, free_port() if tcp else None, *extra).start()
    try:
        yield daemon
    finally:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()
