"""A real daemon in a subprocess and a small synchronous client for the end-to-end tests.

These talk real msgpack over a real socket to a real process with a real SQLite file; the
in-memory Story helper is for the engine's unit tests only.
"""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from turnkeeper_sdk import wire

START_TIMEOUT = 20.0
"""Seconds a daemon may take to start listening on this (shared, noisy) machine."""
CALL_TIMEOUT = 20.0


class CallError(Exception):
    """An error response, with the protocol's stable code and field."""

    def __init__(self, body: wire.ErrorBody) -> None:
        super().__init__(f"{body.code}: {body.message} ({body.field})")
        self.code = body.code
        self.field = body.field


class Client:
    """One connection; notifications that arrive while waiting are kept in ``notes``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(CALL_TIMEOUT)
        self.decoder = wire.Decoder()
        self.ids = itertools.count(1)
        self.notes: list[wire.Notification] = []
        self.pending: list[wire.Message | wire.WireError] = []

    @classmethod
    def unix(cls, path: Path) -> Client:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        return cls(sock)

    @classmethod
    def tcp(cls, port: int) -> Client:
        return cls(socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT))

    def close(self) -> None:
        self.sock.close()

    def _next(self) -> wire.Message | wire.WireError:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the daemon closed the connection")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self, msgid: int) -> wire.Response:
        while True:
            item = self._next()
            if isinstance(item, wire.Response) and item.msgid == msgid:
                return item
            if isinstance(item, wire.Notification):
                self.notes.append(item)

    def call(self, method: str, **params: Any) -> Any:
        msgid = next(self.ids)
        self.sock.sendall(wire.pack(wire.Request(msgid, method, params)))
        answer = self.response(msgid)
        if answer.error is not None:
            assert isinstance(answer.error, wire.ErrorBody)
            raise CallError(answer.error)
        return answer.result

    def notification(self) -> wire.Notification:
        if self.notes:
            return self.notes.pop(0)
        while True:
            item = self._next()
            if isinstance(item, wire.Notification):
                return item

    def hello(self, token: str | None = None) -> Any:
        params: dict[str, Any] = {"protocol": 1, "client": {"name": "tests", "kind": "tool"}}
        if token is not None:
            params["token"] = token
        return self.call("hello", **params)


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
        args = [
            sys.executable,
            "-m",
            "turnkeeper.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--socket",
            str(self.socket),
            "--log-format",
            "json",
        ]
        if self.tcp_port is not None:
            args += ["--tcp", f"127.0.0.1:{self.tcp_port}"]
        args += self.extra
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log.read_text()[-2000:]}")
            try:
                Client.unix(self.socket).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("daemon did not start listening")

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
