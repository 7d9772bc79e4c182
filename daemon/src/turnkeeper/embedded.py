"""A daemon in a child process, for the demo, the tests and the benchmarks."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from turnkeeper_sdk.client import Client

START_TIMEOUT = 30.0
"""Seconds a starting daemon may take to listen, on a busy machine."""


def spawn(data_dir: Path, socket: Path, log: IO[bytes], *extra: str) -> subprocess.Popen[bytes]:
    """Start ``turnkeeper serve`` on ``socket`` and ``data_dir``, logging JSON to ``log``."""
    argv = [
        sys.executable,
        "-m",
        "turnkeeper.cli",
        "serve",
        "--data-dir",
        str(data_dir),
        "--socket",
        str(socket),
        "--log-format",
        "json",
        *extra,
    ]
    return subprocess.Popen(argv, stdout=log, stderr=log)


def connect(process: subprocess.Popen[bytes], socket: Path) -> Client:
    """A connection to the daemon, waiting for it to listen; fails fast if it exits."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited with {process.returncode}; see its log")
        try:
            return Client.unix(socket)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
