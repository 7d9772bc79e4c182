"""What plugins cost a durable command: the commands benchmark's workload against two daemons in
the same repetition, one with only the bundled rulesets plugin (no hook runs per command), one
with every installed plugin (the bundled surprise, auto-reactions and dnd3e-ready: a before-hook
pass and a background hook run per command), and the echo baseline.

    python bench/bench_plugins.py --seconds 5 --reps 3

No target: the figure to watch is the ratio of the two daemons.
"""

from __future__ import annotations

import tkbench as tk
from bench_commands import _worker

SERVERS = {
    "echo": (),
    "no-hooks": ("--plugins", "rulesets"),
    "plugins": (),
}


def main() -> None:
    parser = tk.command_load_parser("durable commands/s with and without plugins")
    args = parser.parse_args()
    print(tk.machine())
    runs: dict[str, list[tk.LoopFigures]] = {name: [] for name in SERVERS}
    for rep in range(args.reps):
        root = tk.workdir(f"plugins-{rep}")
        for name, extra in SERVERS.items():
            where = root / name
            where.mkdir(parents=True, exist_ok=True)
            server = tk.echo(where) if name == "echo" else tk.daemon(where, *extra)
            server.start()
            try:
                spec = {
                    "socket": str(server.socket_path),
                    "conns": args.connections,
                    "tag": "w0",
                    "daemon": name != "echo",
                    "warmup": args.warmup,
                    "seconds": args.seconds,
                }
                figures = tk.measure_loop(server, _worker, [spec], args.warmup, args.seconds)
            finally:
                server.stop()
            runs[name].append(figures)
            print(
                f"rep {rep} {name:8} {figures.calls_per_s:8.0f}/s p50={figures.p50_ms:.2f} ms "
                f"p99={figures.p99_ms:.2f} ms server_cpu={figures.server_cpu:.2f}",
                flush=True,
            )
    rate = {name: tk.median([f.calls_per_s for f in figs]) for name, figs in runs.items()}
    p99 = {name: tk.median([f.p99_ms for f in figs]) for name, figs in runs.items()}
    print(f"\n{args.connections} connections; medians of {args.reps} repetitions\n")
    print(
        tk.table(
            ["server", "commands/s", "p99 ms", "of echo", "of no-hooks"],
            [
                [
                    name,
                    tk.fmt(rate[name]),
                    tk.fmt(p99[name]),
                    f"{rate[name] / rate['echo']:.0%}",
                    f"{rate[name] / rate['no-hooks']:.0%}" if name != "echo" else "",
                ]
                for name in SERVERS
            ],
        )
    )


if __name__ == "__main__":
    main()
