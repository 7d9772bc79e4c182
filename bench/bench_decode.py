"""Decode amplification: what one hostile message costs the daemon, per connection.

A message of empty maps is 1 byte per map on the wire and some 64 in memory once decoded; short
strings multiply by about 17. Each attacker connection sends about 1 MiB shaped so that every
header is within every per-container limit and only the message's byte and value limits can stop
it, then waits until the daemon answers or closes (or, for a message it never finishes, for the
measured window):

- ``empty maps`` and ``2-byte strings``: one message, a tree of arrays of 250, three deep;
- ``unfinished``: arrays of 255 nested in each other, each holding 254 2-byte strings before the
  next array, never closed: before the daemon read headers itself, values were counted only as
  arrays completed, so these strings were the most a connection could make it hold (its byte
  limit over 3 bytes a string); now each array's items count when its header arrives;
- ``wide strings``: one array announcing as many items as a session's value limit allows, then
  that many 60-byte strings each holding a character outside the BMP (which Python stores at
  4 bytes a character), never closed: the most a session can make the daemon hold now.

For each case, a fresh daemon (TCP on loopback, JSON log to a file) and a pinger, a process of
its own: the narrator's ``list_combats`` on the Unix socket every ``PING_EVERY`` seconds, the
whole time. Figures, per repetition:

- memory: the daemon's VmHWM (peak resident) minus its VmRSS just before the attack, divided by
  the attackers (the per-connection cost when they arrive together);
- stall: the longest ping during the attack window minus the median ping before it (how long
  the event loop was held);
- CPU: the daemon's CPU seconds during the attack window minus those of an equally long quiet
  window with the same pinger, divided by the attackers (the machine is shared and noisy: a
  figure within some 50 ms of zero is zero).

    python bench/bench_decode.py --reps 3

Cases: ``before hello`` attackers say nothing first (TCP, no token); ``session`` attackers are
narrator sessions on the Unix socket (their limits are the larger ones). Medians of the reps.
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import tkbench as tk

from turnkeeper_sdk import wire
from turnkeeper_sdk.client import Client

FAN_OUT = 250
"""Items per array in the attack tree: within the strictest per-array limit there is."""
WINDOW = 3.0
"""Seconds measured before and during the attack (the attack itself ends well within)."""
ATTACK_TIMEOUT = 30.0
"""Seconds an attacker waits for the daemon's answer or close before giving up."""
MESSAGE_BYTES = 1024 * 1024
MSGPACK_DEPTH = 1000
"""Arrays nested in the unfinished payload: just within what msgpack itself can track (1024)."""
PING_EVERY = 0.01
"""Seconds between two pings: often enough to see a stall, rare enough to leave the CPU idle."""


def _tree(leaf: Any, leaf_bytes: int) -> Any:
    """Arrays of FAN_OUT nested three deep, as many at the top as fit about 1 MiB."""
    per_top = FAN_OUT * FAN_OUT * leaf_bytes
    top = max(1, (MESSAGE_BYTES - 1024) // per_top)
    return [[[leaf] * FAN_OUT] * FAN_OUT] * top


def _unfinished() -> bytes:
    """``[0, 1, "hello", [{"protocol": 1, "pad": [...`` down MSGPACK_DEPTH arrays, never closed."""
    head: bytes = msgpack.packb([0, 1, "hello", [{"protocol": 1, "pad": None}]])[:-1]
    level = b"\xdc\x00\xff" + b"\xa2ab" * 254
    return head + level * min(MSGPACK_DEPTH, (MESSAGE_BYTES - 1024) // len(level))


WIDE_STRINGS = wire.MAX_REQUEST_VALUES - 16
"""Strings of the wide payload: the value limit, less what the message and params cost."""


def _wide() -> bytes:
    """``[0, 1, "hello", [{"protocol": 1, "pad": [...`` one array of WIDE_STRINGS 60-byte
    strings with a 4-byte character each, never closed."""
    head: bytes = msgpack.packb([0, 1, "hello", [{"protocol": 1, "pad": None}]])[:-1]
    item: bytes = msgpack.packb("\U0001f600" + "x" * 56)
    return head + b"\xdc" + WIDE_STRINGS.to_bytes(2, "big") + item * WIDE_STRINGS


PAYLOADS: dict[str, Any] = {
    "empty maps": _tree({}, 1),
    "2-byte strings": _tree("ab", 3),
    "unfinished": _unfinished,
    "wide strings": _wide,
}
"""A tree sent as one message, or a function making bytes that never end a message."""


def _message(payload: str) -> bytes:
    if callable(PAYLOADS[payload]):
        made: bytes = PAYLOADS[payload]()
        return made
    data: bytes = msgpack.packb([0, 1, "hello", [{"protocol": 1, "pad": PAYLOADS[payload]}]])
    return data


def _hwm_kib(server: tk.Server) -> int:
    for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM line")


class Pinger:
    """The narrator's tool, in a process of its own (no GIL shared with the attackers): one
    ``list_combats`` every PING_EVERY seconds, each timed."""

    def __init__(self, path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--ping", str(path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.times: list[tuple[float, float]] = []

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=tk.CALL_TIMEOUT)
        for line in out.splitlines():
            at, took = line.split()
            self.times.append((float(at), float(took)))

    def between(self, start: float, end: float) -> list[float]:
        return [took for at, took in self.times if start <= at < end]


def ping(path: str) -> None:
    """The pinger's own loop, until SIGTERM; perf_counter is the same clock in every process."""
    client = Client.unix(path, timeout=tk.CALL_TIMEOUT)
    client.hello(name="pinger")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    while not stopping.is_set():
        started = time.perf_counter()
        client.call("list_combats")
        print(started, time.perf_counter() - started, flush=False)
        time.sleep(PING_EVERY)


def _attack(server: tk.Server, port: int, data: bytes, session: bool, wait: float) -> None:
    if session:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(ATTACK_TIMEOUT)
        sock.connect(str(server.socket_path))
        sock.sendall(msgpack.packb([0, 0, "hello", [{"protocol": 1}]]))
        sock.recv(65536)
    else:
        sock = socket.create_connection(("127.0.0.1", port), timeout=ATTACK_TIMEOUT)
    try:
        sock.sendall(data)
        # Wait for an answer (the refused hello) or the close (message_too_large).
        sock.settimeout(wait)
        sock.recv(65536)
    except OSError:
        pass  # reset by the daemon while still sending: refused early
    finally:
        sock.close()


def _one(root: Path, payload: str, attackers: int, session: bool) -> dict[str, float]:
    port = tk.free_port()
    server = tk.daemon(root, "--tcp", f"127.0.0.1:{port}").start()
    try:
        data = _message(payload)
        wait = WINDOW if callable(PAYLOADS[payload]) else ATTACK_TIMEOUT
        pinger = Pinger(server.socket_path)
        time.sleep(1.0)
        quiet_start = time.perf_counter()
        cpu_quiet = server.cpu_seconds()
        time.sleep(WINDOW)
        cpu_before = server.cpu_seconds()
        quiet_cpu = cpu_before - cpu_quiet
        rss_before = server.rss_kib()
        attack_start = time.perf_counter()
        threads = [
            threading.Thread(target=_attack, args=(server, port, data, session, wait))
            for _ in range(attackers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(ATTACK_TIMEOUT)
        rest = WINDOW - (time.perf_counter() - attack_start)
        if rest > 0:
            time.sleep(rest)
        attack_end = time.perf_counter()
        cpu_attack = server.cpu_seconds() - cpu_before
        peak = _hwm_kib(server)
        pinger.stop()
        quiet = pinger.between(quiet_start, attack_start)
        loud = pinger.between(attack_start, attack_end)
        window = attack_end - attack_start
        return {
            "memory_mib": max(0, peak - rss_before) / 1024 / attackers,
            "stall_ms": (max(loud) - statistics.median(quiet)) * 1000,
            "cpu_ms": (cpu_attack - quiet_cpu * window / WINDOW) * 1000 / attackers,
            "message_kib": len(data) / 1024,
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--attackers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--ping", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ping:
        ping(args.ping)
        return
    print(tk.machine())
    root = tk.workdir("decode")
    rows = []
    for payload in PAYLOADS:
        cases = [(n, False) for n in args.attackers] + [(1, True)]
        for attackers, session in cases:
            runs = [
                _one(root / f"{payload}-{attackers}-{session}-{rep}", payload, attackers, session)
                for rep in range(args.reps)
            ]
            rows.append(
                [
                    payload,
                    "session (Unix)" if session else "before hello (TCP)",
                    attackers,
                    tk.fmt(runs[0]["message_kib"], 0),
                    tk.fmt(tk.median([r["memory_mib"] for r in runs]), 1),
                    tk.fmt(tk.median([r["stall_ms"] for r in runs]), 0),
                    tk.fmt(tk.median([r["cpu_ms"] for r in runs]), 0),
                ]
            )
    headers = [
        "payload",
        "attackers are",
        "attackers",
        "message KiB",
        "peak memory per attacker, MiB",
        "longest ping minus median, ms",
        "daemon CPU per attacker, ms",
    ]
    print(tk.table(headers, rows))


if __name__ == "__main__":
    main()
