"""The engine alone: CPU µs per durable command in process, with no daemon, socket or store.

The workload of ``bench_commands.py`` (a marvel combat of one combatant, ``apply_condition`` and
``remove_condition`` alternating, each two events) through ``turnkeeper_engine.Engine`` and its
memory log: what one command costs the engine's pipeline (decide, fold, undo history), and the
same with its events encoded as a host records them (``event_to_plain``). The daemon's CPU per
command in ``bench_commands.py`` includes this; the rest is the daemon's own.

    python bench/bench_engine.py --commands 5000 --reps 5

The measurement runs in a child process whose ``PYTHONPATH`` starts with the engine of
``TURNKEEPER_BENCH_CHECKOUT`` when it is set (before and after a change, as the other scripts).
Figures are CPU time (``time.process_time``) per command, median of the repetitions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

WARMUP = 500
"""Commands run before each measured repetition: the combat's undo history fills its first
stretches, as a combat in play has them."""


def _child(commands: int, reps: int) -> dict[str, list[float]]:
    from turnkeeper_engine import BUNDLED_RULES, Engine, SeededDice
    from turnkeeper_engine import commands as cmd
    from turnkeeper_engine import events as ev
    from turnkeeper_engine.plain import event_to_plain

    def run(engine: Engine, n: int, now: list[float], encode: bool) -> None:
        condition = ""
        for i in range(n):
            now[0] += 0.001
            command: cmd.Command
            if i % 2 == 0:
                command = cmd.ApplyCondition(target="k", type="custom")
            else:
                command = cmd.RemoveCondition(condition)
            events = engine.handle(command, now[0])
            assert isinstance(events, list), events
            if i % 2 == 0:
                applied = next(e for e in events if isinstance(e, ev.ConditionApplied))
                condition = applied.condition.id
            if encode:
                for e in events:
                    event_to_plain(e)

    figures: dict[str, list[float]] = {"handle": [], "handle + event_to_plain": []}
    for _ in range(reps):
        for name in figures:
            engine = Engine(SeededDice(1), rules=BUNDLED_RULES)
            now = [1000.0]
            engine.handle(cmd.CreateCombat("bench", "marvel"), now[0])
            engine.handle(cmd.AddCombatant("k", "K"), now[0])
            encode = name != "handle"
            run(engine, WARMUP, now, encode)
            started = time.process_time()
            run(engine, commands, now, encode)
            figures[name].append((time.process_time() - started) / commands * 1e6)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="the engine's CPU µs per durable command")
    parser.add_argument("--commands", type=int, default=5000, help="measured per repetition")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.commands, args.reps)))
        return
    import tkbench as tk

    print(tk.machine())
    argv = [sys.executable, __file__, "--child", "--commands", str(args.commands)]
    done = subprocess.run(
        [*argv, "--reps", str(args.reps)],
        env=tk.daemon_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=tk.WORKER_TIMEOUT,
    )
    figures: dict[str, Any] = json.loads(done.stdout)
    print(f"\n{args.commands} commands a repetition; medians of {args.reps} repetitions\n")
    print(
        tk.table(
            ["per command", "CPU µs", "each repetition"],
            [
                [name, tk.fmt(tk.median(runs), 1), " ".join(f"{r:.1f}" for r in runs)]
                for name, runs in figures.items()
            ],
        )
    )


if __name__ == "__main__":
    main()
