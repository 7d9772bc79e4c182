"""``turnkeeper serve`` with Python's allocations traced: the daemon's own command line, run under
``tracemalloc``, so that a benchmark can ask how much memory Python objects hold (not the
allocator's arenas, SQLite's page cache or the interpreter's code, which VmRSS includes).

On SIGUSR1 the process collects garbage and writes ``{"current": bytes, "peak": bytes}`` to the
file named by ``TURNKEEPER_BENCH_TRACE_OUT``.

    TURNKEEPER_BENCH_TRACE_OUT=/tmp/t.json python bench/traced_serve.py serve --data-dir D ...
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

OUT_VARIABLE = "TURNKEEPER_BENCH_TRACE_OUT"
TRACE_FRAMES = 1
"""Frames kept per allocation: one is enough for a total, and keeps tracing's own cost low."""


def _report(_signum: int, _frame: FrameType | None) -> None:
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    out = Path(os.environ[OUT_VARIABLE])
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps({"current": current, "peak": peak}))
    partial.replace(out)  # whole or absent: the benchmark polls for it


def main() -> None:
    tracemalloc.start(TRACE_FRAMES)
    signal.signal(signal.SIGUSR1, _report)
    sys.argv = ["turnkeeper", *sys.argv[1:]]
    runpy.run_module("turnkeeper.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
