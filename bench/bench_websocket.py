"""What WebSocket costs a durable command: the commands benchmark's workload (50 connections,
each alternating ``apply_condition`` and ``remove_condition`` on its own combat) against one
daemon serving both ``--ws`` and its Unix socket, over each transport in turn in the same
repetition.

    python bench/bench_websocket.py --seconds 5 --reps 3

No target: the figure to watch is the WebSocket rate as a share of the Unix socket's.
"""

from __future__ import annotations

import tkbench as tk
from bench_commands import _worker

TRANSPORTS = ("unix", "ws")


def main() -> None:
    parser = tk.command_load_parser("durable commands/s over WebSocket vs Unix")
    args = parser.parse_args()
    print(tk.machine())
    runs: dict[str, list[tk.LoopFigures]] = {name: [] for name in TRANSPORTS}
    for rep in range(args.reps):
        root = tk.workdir(f"websocket-{rep}")
        token = tk.narrator_token(root / "data")
        port = tk.free_port()
        server = tk.daemon(root, "--ws", f"127.0.0.1:{port}").start()
        try:
            for name in TRANSPORTS:
                spec = {
                    "socket": str(server.socket_path),
                    "ws": [port, token] if name == "ws" else None,
                    "conns": args.connections,
                    "tag": f"{name}{rep}",
                    "daemon": True,
                    "warmup": args.warmup,
                    "seconds": args.seconds,
                }
                figures = tk.measure_loop(server, _worker, [spec], args.warmup, args.seconds)
                runs[name].append(figures)
                print(
                    f"rep {rep} {name:4} {figures.calls_per_s:8.0f}/s p50={figures.p50_ms:.2f} ms "
                    f"p99={figures.p99_ms:.2f} ms server_cpu={figures.server_cpu:.2f}",
                    flush=True,
                )
        finally:
            server.stop()
    rate = {name: tk.median([f.calls_per_s for f in figs]) for name, figs in runs.items()}
    p50 = {name: tk.median([f.p50_ms for f in figs]) for name, figs in runs.items()}
    p99 = {name: tk.median([f.p99_ms for f in figs]) for name, figs in runs.items()}
    print(f"\n{args.connections} connections; medians of {args.reps} repetitions\n")
    print(
        tk.table(
            ["figure", "unix socket", "websocket", "websocket / unix"],
            [
                [
                    "commands/s",
                    tk.fmt(rate["unix"]),
                    tk.fmt(rate["ws"]),
                    f"{rate['ws'] / rate['unix']:.0%}",
                ],
                ["p50 ms", tk.fmt(p50["unix"]), tk.fmt(p50["ws"]), ""],
                ["p99 ms", tk.fmt(p99["unix"]), tk.fmt(p99["ws"]), ""],
            ],
        )
    )


if __name__ == "__main__":
    main()
