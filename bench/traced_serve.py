"""``turnkeeper serve`` with Python's allocations traced: the daemon's own command line, run under
``tracemalloc``, so that a benchmark can ask how much memory Python objects hold (not the
allocator's arenas, SQLite's page cache or the interpreter's code, which VmRSS includes).

On SIGUSR1 the process collects garbage and writes ``{"current": bytes, "peak": bytes, "by_part":
{part: bytes}, "recent_answers": bytes, "top": [...], "pymalloc": text}`` to the file named by
``TURNKEEPER_BENCH_TRACE_OUT``: ``by_part`` splits what is held by where it was allocated
(``PARTS``), ``recent_answers`` is what the store counts for its memory of recent answers
(``store.MAX_RECENT_BYTES``), ``top`` the largest tracebacks and ``pymalloc`` the allocator's
arenas and pools (``sys._debugmallocstats``). What a collection frees is not counted: garbage
a daemon keeps until its next full collection shows only in VmRSS.

    TURNKEEPER_BENCH_TRACE_OUT=/tmp/t.json python bench/traced_serve.py serve --data-dir D ...
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import sys
import tempfile
import tracemalloc
import weakref
from pathlib import Path
from types import FrameType
from typing import Any

OUT_VARIABLE = "TURNKEEPER_BENCH_TRACE_OUT"
FRAMES_VARIABLE = "TURNKEEPER_BENCH_TRACE_FRAMES"
TRACE_FRAMES = 1
"""Frames kept per allocation by default: one is enough for a total and for the file that
allocated it, and keeps tracing's own cost low. More (``FRAMES_VARIABLE``) tell which caller
holds what (``TOP_TRACEBACKS``)."""
TOP_TRACEBACKS = 30
"""Tracebacks the report lists, largest first (``top``)."""

PARTS = {
    "engine": f"{os.sep}turnkeeper_engine{os.sep}",
    "store": f"{os.sep}turnkeeper{os.sep}store.py",
}
"""Where an allocation was made, by a fragment of its file's path: the engine (combat states and
their undo history; strings decoded by the wire codec and kept in a state count as "other"), the
store (its recent answers, the last seq of each combat, the filter of request ids). The rest
is "other"."""


def _part(filename: str) -> str:
    return next((part for part, fragment in PARTS.items() if fragment in filename), "other")


_RECENTS: weakref.WeakSet[Any] = weakref.WeakSet()
"""The store's memories of recent answers, noted as they are made: the daemon freezes what it
holds at start-up, and frozen objects are not among ``gc.get_objects()``."""


def _note_recents() -> None:
    from turnkeeper import store

    made = store._Recent.__init__

    def noted(self: Any) -> None:
        made(self)
        _RECENTS.add(self)

    store._Recent.__init__ = noted


def _recent_answers() -> int:
    """The bytes the store counts for its recent answers (their encoded bytes and
    ``RECENT_ENTRY_BYTES`` each)."""
    return sum(recent._bytes for recent in _RECENTS)


def _pymalloc() -> str:
    """``sys._debugmallocstats()``'s account of pymalloc's arenas and pools (it writes to the
    C stderr, so it is caught through a temporary file put in place of descriptor 2)."""
    with tempfile.TemporaryFile() as caught:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        return caught.read().decode(errors="replace")


def _report(_signum: int, _frame: FrameType | None) -> None:
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    by_part = dict.fromkeys([*PARTS, "other"], 0)
    snapshot = tracemalloc.take_snapshot()
    for stat in snapshot.statistics("filename"):
        by_part[_part(stat.traceback[0].filename)] += stat.size
    top = [
        {"kib": stat.size / 1024, "count": stat.count, "where": stat.traceback.format()}
        for stat in snapshot.statistics("traceback")[:TOP_TRACEBACKS]
    ]
    report = {
        "current": current,
        "peak": peak,
        "by_part": by_part,
        "recent_answers": _recent_answers(),
        "top": top,
        "pymalloc": _pymalloc(),
    }
    out = Path(os.environ[OUT_VARIABLE])
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(report))
    partial.replace(out)  # whole or absent: the benchmark polls for it


def main() -> None:
    _note_recents()
    tracemalloc.start(int(os.environ.get(FRAMES_VARIABLE, TRACE_FRAMES)))
    signal.signal(signal.SIGUSR1, _report)
    sys.argv = ["turnkeeper", *sys.argv[1:]]
    runpy.run_module("turnkeeper.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
