"""``turnkeeper serve`` with the SQLite committer timed from inside: the daemon's own command line,
with the store's committer methods wrapped to record, per transaction, the batches in its group,
the time from its start to its end, the time of its ``COMMIT`` statement (the WAL write and its
fsync, and a checkpoint if SQLite runs one inside it), snapshot encodings, event moves, request
indexings, prunes, the transactions aside (``_write_aside``: snapshots, moves and indexings
written after the answers, where the daemon has them) and the committer's checkpoints; and the
CPU time of each thread (``/proc/self/task``).

On SIGUSR1 the process writes what it recorded since the last SIGUSR1 (and clears it) to the file
named by ``TURNKEEPER_BENCH_COMMITTER_OUT`` as JSON: ``{"commits": [[batches, total_ms,
commit_ms, snapshot_ms, move_ms, index_ms], ...], "prunes_ms": [...], "checkpoints_ms":
[...], "asides_ms": [...], "threads": {name: cpu_seconds}}``. A snapshot encoded, events moved
or requests indexed in a transaction aside count in ``asides_ms``, not in the commit's row.
``bench_latency.py --committer`` reads it around its window.

    TURNKEEPER_BENCH_COMMITTER_OUT=/tmp/c.json python bench/committer_traced_serve.py serve ...

What it wraps are private methods of ``turnkeeper.store.Store``: a version of the daemon without
one of them is measured without that timing (the figure is absent, not wrong).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import threading
import time
from functools import wraps
from pathlib import Path
from types import FrameType
from typing import Any

OUT_VARIABLE = "TURNKEEPER_BENCH_COMMITTER_OUT"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

_commits: list[list[float]] = []
_prunes: list[float] = []
_checkpoints: list[float] = []
_asides: list[float] = []
_current: dict[str, float] = {}
_lock = threading.Lock()


class _TimedConnection:
    """The writer's connection, timing its ``COMMIT`` statements."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            t = time.perf_counter()
            try:
                return self._inner.execute(sql, *args)
            finally:
                _current["commit"] = _current.get("commit", 0.0) + time.perf_counter() - t
        if sql.startswith("PRAGMA wal_checkpoint"):
            t = time.perf_counter()
            try:
                return self._inner.execute(sql, *args)
            finally:
                with _lock:
                    _checkpoints.append((time.perf_counter() - t) * 1000)
        return self._inner.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _wrap(store: Any) -> None:
    cls = store.Store
    opened = cls.__init__

    @wraps(opened)
    def init(self: Any, writer: Any, *args: Any, **kwargs: Any) -> None:
        opened(self, writer, *args, **kwargs)
        self._writer = _TimedConnection(self._writer)

    cls.__init__ = init

    def timed(name: str, key: str) -> None:
        inner = getattr(cls, name, None)
        if inner is None:
            return

        @wraps(inner)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(self, *args, **kwargs)
            finally:
                _current[key] = _current.get(key, 0.0) + time.perf_counter() - t

        setattr(cls, name, method)

    for name, key in (
        ("_encode_snapshot", "snapshot"),
        ("_encode_snapshots", "snapshot"),
        ("_move_events", "move"),
        ("_index_requests", "index"),
    ):
        timed(name, key)

    write = cls._write

    @wraps(write)
    def _write(self: Any, group: Any) -> None:
        _current.clear()  # what a transaction aside timed before is not this commit's
        t = time.perf_counter()
        try:
            write(self, group)
        finally:
            total = time.perf_counter() - t
            row = [
                len(group),
                total * 1000,
                _current.get("commit", 0.0) * 1000,
                _current.get("snapshot", 0.0) * 1000,
                _current.get("move", 0.0) * 1000,
                _current.get("index", 0.0) * 1000,
            ]
            with _lock:
                _commits.append(row)

    cls._write = _write

    for name, into in (("_prune", _prunes), ("_write_aside", _asides)):
        inner = getattr(cls, name, None)
        if inner is None:
            continue

        def make(inner: Any, into: list[float]) -> Any:
            @wraps(inner)
            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return inner(self, *args, **kwargs)
                finally:
                    with _lock:
                        into.append((time.perf_counter() - t) * 1000)

            return method

        setattr(cls, name, make(inner, into))


def _threads() -> dict[str, float]:
    """CPU seconds of each thread of this process, by name (names made unique with the tid)."""
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        out[f"{name}/{task.name}"] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


def _dump(_signum: int, _frame: FrameType | None) -> None:
    with _lock:
        figures = {
            "commits": list(_commits),
            "prunes_ms": list(_prunes),
            "checkpoints_ms": list(_checkpoints),
            "asides_ms": list(_asides),
            "threads": _threads(),
        }
        for recorded in (_commits, _prunes, _checkpoints, _asides):
            recorded.clear()
    Path(os.environ[OUT_VARIABLE]).write_text(json.dumps(figures))


def main() -> None:
    from turnkeeper import store

    _wrap(store)
    signal.signal(signal.SIGUSR1, _dump)
    sys.argv = ["turnkeeper", *sys.argv[1:]]
    runpy.run_module("turnkeeper.cli", run_name="__main__")


if __name__ == "__main__":
    main()
