"""Fan-out over WebSocket against a real peer: N views of one combat on the daemon's WebSocket
endpoint (``--ws``) against the same N views of one room on a socket.io relay equivalent to
Improved Initiative's player-view relay, both driven by the same Node client, alternating in the
same repetition. The relay is the peer kit's in ``shared/peers/`` (found in a ``shared/peers``
folder beside the checkout or above it, or given with ``--peers``; its README says how it works);
the client is ``peer_client.mjs``, the kit's client opening views 8 at a time (see its head).

For each system: a writer sends COUNT updates INTERVAL ms apart (``end_turn`` for the daemon, an
``update encounter`` of a 10-combatant encounter for the relay); latency is each view's receipt
(the time its TCP socket's read returned the bytes, parsed only after the run, for both
systems: see ``peer_client.mjs``) minus the update's send, on the one wall clock of this host;
server CPU per update is the server process's utime + stime (``/proc/PID/stat``) over the
writer's run divided by the updates. Where the time goes is shown beside: per update (medians),
when its first view got it, from then to its last view (the server's writes to every view), and
the daemon's reply to the writer (its commit; "-" for the relay, which answers nothing).

Needs Node.js 20+ and, once, ``npm install socket.io socket.io-client ws @msgpack/msgpack`` in a
scratch folder: done on first use in ``$TMPDIR/turnkeeper-bench-<uid>/node`` (``--node-modules``
names another).

    python bench/bench_peer_fanout.py --views 10 250 500 --updates 100 --reps 3

Targets (issue 11): at 500 WebSocket views, p99 at most 15 ms and daemon CPU per update no higher
than the relay's. The daemon's WebSocket connection limits are raised with whatever ``serve``
option exists for them (printed at the start); where none does, views beyond its limit are
refused and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import tkbench as tk

COMBAT = "peer-fanout"
COMBATANTS = 10
"""As many as the relay's encounter has."""
TARGET_P99_MS = 15.0
TARGET_VIEWS = 500
NODE_PACKAGES = ("socket.io", "socket.io-client", "ws", "@msgpack/msgpack")
READY_TIMEOUT = 120.0
"""Seconds N views may take to connect and subscribe."""
SETTLE_SECONDS = 1.0
"""After the writer's last update, before the views are told to write their receipts."""
LIMIT_HEADROOM = 64
"""Connections allowed beyond the views, for the writer and the set-up connection."""


def _find_peers(given: Path | None) -> Path:
    if given is not None:
        return given
    for parent in tk.REPO.parents:
        if (parent / "shared" / "peers" / "ii_relay.cjs").is_file():
            return parent / "shared" / "peers"
    raise SystemExit("no shared/peers/ beside or above the checkout: give --peers DIR")


def _node_modules(given: Path | None) -> Path:
    """``node_modules`` holding the peer kit's packages, installed with npm if missing."""
    folder = given or (tk.workdir_root() / "node" / "node_modules")
    if all((folder / name / "package.json").is_file() for name in NODE_PACKAGES):
        return folder
    scratch = folder.parent
    scratch.mkdir(parents=True, exist_ok=True)
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm not found: Node.js 20+ with npm is needed for the peer comparison")
    if not (scratch / "package.json").exists():
        (scratch / "package.json").write_text('{"private": true}\n')
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", *NODE_PACKAGES],
        cwd=scratch,
        check=True,
        timeout=600,
    )
    return folder


class Node:
    """The peer kit's Node client (or relay) as a subprocess."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=out, text=True)

    def wait_ready(self) -> str | None:
        """None once it printed READY; else what it said when it died or timed out."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    break
                line = self.process.stdout.readline()
                if line.strip() == "READY":
                    return None
                if not line:
                    self.process.wait(timeout=tk.STOP_TIMEOUT)
                    said = self.log.read_text(errors="replace").splitlines()
                    errors = [x for x in said if "Error" in x and not x.startswith(" ")]
                    return (errors or said or ["exited"])[-1].strip()
        self.process.kill()
        return f"not ready after {READY_TIMEOUT:g} s"

    def finish(self, timeout: float = tk.STOP_TIMEOUT) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=tk.STOP_TIMEOUT)


async def _setup(sock: Path) -> None:
    """A started combat of 10 combatants, so that ``end_turn`` moves a real turn order."""
    conn = await tk.Conn.open(sock)
    await conn.call("create_combat", {"request_id": "c", "combat_id": COMBAT, "ruleset": "marvel"})
    for i in range(COMBATANTS):
        await conn.call(
            "add_combatant",
            {"request_id": f"a{i}", "combat": COMBAT, "id": f"k{i}", "display_name": f"K{i}"},
        )
    await conn.call("start_combat", {"request_id": "s", "combat": COMBAT})
    await conn.aclose()


def _limit_options(views: int) -> list[str]:
    """Every ``serve`` option that caps connections, set to let ``views`` WebSocket sessions in."""
    found = [o for o in tk.serve_options() if "connections" in o or "sessions" in o]
    value = str(views + LIMIT_HEADROOM)
    return [part for option in found for part in (option, value)]


def _measure(
    args: argparse.Namespace, kind: str, views: int, rep: int, peers: Path
) -> dict[str, Any]:
    root = tk.workdir(f"peer-fanout-{rep}-{kind}-{views}")
    port = tk.free_port()
    extra: list[str] = []
    if kind == "ii":
        server = tk.Server(
            ["node", str(peers / "ii_relay.cjs"), str(port)],
            root / "unused.sock",
            root / "relay.log",
            tcp_port=port,
        )
        url = f"http://127.0.0.1:{port}"
    else:
        extra = [tk.narrator_token(root / "data"), COMBAT]
        server = tk.daemon(root, "--ws", f"127.0.0.1:{port}", *args.limit_options)
        url = f"ws://127.0.0.1:{port}/ws"
    client = str(tk.BENCH / "peer_client.mjs")
    server.start()
    try:
        if kind == "tk":
            anyio.run(_setup, server.socket_path)
        subs_out, writer_out = root / "subs.json", root / "writer.json"
        subs = Node(
            ["node", client, "sub", kind, url, str(views), str(subs_out), *extra],
            root / "subs.log",
        )
        refused = subs.wait_ready()
        if refused is not None:
            subs.process.kill()
            subs.finish()
            return {"refused": refused}
        cpu = server.cpu_seconds()
        writer = Node(
            [
                "node",
                client,
                "write",
                kind,
                url,
                str(args.updates),
                str(args.interval),
                str(writer_out),
                *extra,
            ],
            root / "writer.log",
        )
        if writer.finish(timeout=tk.WORKER_TIMEOUT) != 0:
            raise RuntimeError(f"{kind} writer failed: {(root / 'writer.log').read_text()[-500:]}")
        cpu = server.cpu_seconds() - cpu
        time.sleep(SETTLE_SECONDS)
        subs.process.send_signal(signal.SIGTERM)
        if subs.finish() != 0:
            raise RuntimeError(f"{kind} views failed: {(root / 'subs.log').read_text()[-500:]}")
    finally:
        server.stop()
    wrote = json.loads(writer_out.read_text())
    sent = {int(k): v for k, v in wrote["sent"].items()}
    got = json.loads(subs_out.read_text())
    latencies = [at - sent[int(key)] for key, at in got["receipts"] if int(key) in sent]
    # Each update's first and last receipt over all views: the first is the server's way in
    # (for the daemon, its durable commit) and its first write; from first to last, its writes
    # to every view (and any view the client read late).
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for key, at in got["receipts"]:
        if int(key) in sent:
            first[int(key)] = min(first.get(int(key), at), at)
            last[int(key)] = max(last.get(int(key), at), at)
    return {
        "p50": tk.percentile(latencies, 50),
        "p99": tk.percentile(latencies, 99),
        "max": max(latencies, default=float("nan")),
        "first": tk.median([at - sent[key] for key, at in first.items()]),
        "spread": tk.median([last[key] - first[key] for key in first]),
        # The daemon's answer to the writer (its commit); the relay answers nothing.
        "reply_p50": tk.percentile(wrote["replies"], 50),
        "cpu_ms": cpu / args.updates * 1000,
        "delivered": len(latencies) / (len(sent) * got["conns"]) if sent else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="WebSocket fan-out vs a socket.io relay")
    parser.add_argument("--views", type=int, nargs="+", default=[10, 250, TARGET_VIEWS])
    parser.add_argument("--updates", type=int, default=100, help="updates per measurement")
    parser.add_argument("--interval", type=float, default=50.0, help="ms between updates")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--peers", type=Path, help="the peer kit (default: shared/peers)")
    parser.add_argument("--node-modules", type=Path, help="where its npm packages are")
    args = parser.parse_args()
    print(tk.machine())
    peers = _find_peers(args.peers)
    # Every Node process started from here (the relay and the clients) finds the packages.
    os.environ["NODE_PATH"] = str(_node_modules(args.node_modules))
    args.limit_options = _limit_options(max(args.views))
    print(
        "daemon connection-limit options: "
        + (" ".join(args.limit_options) or "none found in `turnkeeper serve --help`"),
        flush=True,
    )
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for views in args.views:
            for kind in ("ii", "tk"):
                figures = _measure(args, kind, views, rep, peers)
                runs.setdefault((kind, views), []).append(figures)
                if "refused" in figures:
                    print(f"rep {rep} {kind} {views:3} views: refused: {figures['refused']}")
                    continue
                print(
                    f"rep {rep} {kind} {views:3} views: p50={figures['p50']:.2f} ms "
                    f"p99={figures['p99']:.2f} ms max={figures['max']:.2f} ms; "
                    f"first view {figures['first']:.2f} ms, last-first {figures['spread']:.2f} ms, "
                    f"writer reply p50 {tk.fmt(figures['reply_p50'])} ms; "
                    f"cpu={figures['cpu_ms']:.2f} ms/update delivered={figures['delivered']:.1%}",
                    flush=True,
                )
    print(
        f"\n{args.updates} updates {args.interval:g} ms apart; ii = the socket.io relay, tk = the "
        f"daemon over WebSocket; medians of {args.reps} repetitions\n"
    )
    rows = []
    for views in args.views:
        ok = {kind: [r for r in runs[(kind, views)] if "refused" not in r] for kind in ("ii", "tk")}

        def med(kind: str, key: str, ok: dict[str, list[dict[str, Any]]] = ok) -> float:
            return tk.median([r[key] for r in ok[kind]])

        for kind in ("ii", "tk"):
            if not ok[kind]:
                rows.append([views, kind, "refused", "", "", "", "", "", "", "", "", "", ""])
                continue
            cpu_ratio = med(kind, "cpu_ms") / med("ii", "cpu_ms") if ok["ii"] else float("nan")
            met = ""
            if kind == "tk" and views == TARGET_VIEWS:
                met = "yes" if med("tk", "p99") <= TARGET_P99_MS else "no"
                met += " / " + ("yes" if cpu_ratio <= 1.0 else "no")
            rows.append(
                [
                    views,
                    kind,
                    tk.fmt(med(kind, "p50")),
                    tk.fmt(med(kind, "p99")),
                    tk.fmt(med(kind, "max")),
                    tk.fmt(med(kind, "first")),
                    tk.fmt(med(kind, "spread")),
                    tk.fmt(med(kind, "reply_p50")),
                    tk.fmt(med(kind, "cpu_ms")),
                    f"{cpu_ratio:.1f}x",
                    f"{med(kind, 'delivered'):.1%}",
                    f"{len(ok[kind])}/{len(runs[(kind, views)])}",
                    met,
                ]
            )
    headers = [
        "views",
        "server",
        "p50 ms",
        "p99 ms",
        "max ms",
        "first view ms",
        "last - first ms",
        "writer reply p50 ms",
        "CPU ms/update",
        "CPU / relay",
        "delivered",
        "runs served",
        f"p99 ≤ {TARGET_P99_MS:g} / CPU ≤ relay?",
    ]
    print(tk.table(headers, rows))


if __name__ == "__main__":
    main()
