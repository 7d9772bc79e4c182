"""What running hooks in plugins' own threads costs, in process: the time one hook call takes
through the plugin host (a synchronous and an async hook that do nothing), against calling the
function directly; and how much of the event loop is left while a plugin spins in a busy loop
that the host has given up on (the loop's turns per second with and without it).

    python bench/bench_hook_calls.py --calls 5000 --reps 3

No target: the figures say what isolation costs per call, and what a stuck plugin costs the
daemon until it is restarted.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import anyio
import tkbench as tk

from turnkeeper_sdk import hookimpl
from turnkeeper_sdk.plugins import PluginHost

LOOP_SECONDS = 1.0
"""How long the event loop's turns are counted, with and without a spinning plugin."""


class Quiet:
    """Hooks that do nothing: what is measured is the host's own cost."""

    @hookimpl
    def on_round_start(self, round: int) -> None:
        return None

    @hookimpl
    async def on_round_end(self, round: int) -> None:
        return None


class Spins:
    """A hook stuck in a busy loop until told to stop (so the benchmark can end it)."""

    def __init__(self) -> None:
        self.stop = threading.Event()

    @hookimpl
    def on_turn_end(self) -> None:
        while not self.stop.is_set():
            pass


async def _per_call(host: PluginHost, hook: str, calls: int) -> float:
    """Microseconds per call of ``hook`` through the host."""
    started = time.perf_counter()
    for _ in range(calls):
        await host.call(hook, "bench", (), round=1, combat=None, event=None)
    return (time.perf_counter() - started) / calls * 1e6


def _direct(calls: int) -> float:
    quiet = Quiet()
    started = time.perf_counter()
    for _ in range(calls):
        quiet.on_round_start(round=1)
    return (time.perf_counter() - started) / calls * 1e6


async def _loop_turns() -> float:
    """The event loop's turns per second, each a checkpoint."""
    turns = 0
    deadline = time.perf_counter() + LOOP_SECONDS
    while time.perf_counter() < deadline:
        await anyio.lowlevel.checkpoint()
        turns += 1
    return turns / LOOP_SECONDS


async def _rep(calls: int) -> dict[str, float]:
    host = PluginHost(budget=1.0, report=lambda what, **details: None)
    host.register(Quiet(), "quiet")
    spins = Spins()
    host.register(spins, "spins")
    figures = {
        "direct": _direct(calls),
        "sync": await _per_call(host, "on_round_start", calls),
        "async": await _per_call(host, "on_round_end", calls),
        "loop": await _loop_turns(),
    }
    # Given up on at its budget; its thread spins on while the loop is measured again.
    host.budget = 0.05
    await host.call("on_turn_end", "bench", (), combat=None, event=None)
    assert host.held(), "the spinning call should still be running"
    figures["loop_spinning"] = await _loop_turns()
    spins.stop.set()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="the cost of hook calls in plugins' threads")
    parser.add_argument("--calls", type=int, default=5000, help="hook calls per measurement")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(tk.machine())
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        figures = anyio.run(_rep, args.calls)
        runs.append(figures)
        print(
            f"rep {rep} direct={figures['direct']:.2f} µs sync={figures['sync']:.1f} µs "
            f"async={figures['async']:.1f} µs loop={figures['loop']:.0f}/s "
            f"loop_spinning={figures['loop_spinning']:.0f}/s",
            flush=True,
        )

    def mid(key: str) -> float:
        return tk.median([r[key] for r in runs])

    print(f"\n{args.calls} calls per measurement; medians of {args.reps} repetitions\n")
    print(
        tk.table(
            ["what", "figure"],
            [
                ["calling the function directly", f"{mid('direct'):.2f} µs"],
                ["a synchronous hook through the host", f"{mid('sync'):.1f} µs"],
                ["an async hook through the host", f"{mid('async'):.1f} µs"],
                ["event loop turns, alone", f"{tk.fmt(mid('loop'))} /s"],
                ["event loop turns, a plugin spinning", f"{tk.fmt(mid('loop_spinning'))} /s"],
                ["left to the loop", f"{mid('loop_spinning') / mid('loop'):.0%}"],
            ],
        )
    )


if __name__ == "__main__":
    main()
