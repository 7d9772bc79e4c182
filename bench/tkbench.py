"""What the benchmarks share: server subprocesses, an async protocol connection, worker processes
and the arithmetic of the figures.

Every load goes to a Unix socket or a loopback port of this machine. Every loop a benchmark runs
is bounded both in time and in count; the constants below are the bounds that are not per-script
options.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import msgpack  # type: ignore[import-untyped]
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request

from turnkeeper_sdk import wire

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

START_TIMEOUT = 120.0
"""Seconds a server may take to accept connections: recovery of a large data dir is slow."""
STOP_TIMEOUT = 20.0
CALL_TIMEOUT = 30.0
"""No single call in a benchmark may hang longer than this: a stuck daemon ends the run."""
WORKER_TIMEOUT = 300.0
"""Seconds a worker process may take from spawn to its result before the run is abandoned."""
RECV_BYTES = 65536
MAX_EARLY_NOTES = 100_000
"""Notifications a connection keeps while it waits for a response; more means a bug."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OPEN_BATCH = 25
"""Connections opened at once on the Unix socket: well within the listener's backlog."""
WEB_PENDING_PER_ADDRESS = 8
"""Connections one address may have waiting for their hello on a TCP or WebSocket listener
(protocol.md, "Session": ``server.MAX_PENDING_PER_ADDRESS``); more at once are refused."""


class CallError(Exception):
    """An error response from the server."""

    def __init__(self, body: wire.ErrorBody) -> None:
        super().__init__(f"{body.code}: {body.message} ({body.field})")
        self.code = body.code


# --------------------------------------------------------------------------------- servers


class Server:
    """A server subprocess listening on a Unix socket (the daemon or an echo baseline) or on a
    loopback TCP port (a peer)."""

    def __init__(
        self,
        argv: list[str],
        socket_path: Path,
        log_path: Path,
        *,
        tcp_port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        self.socket_path = socket_path
        self.log_path = log_path
        # Set for a server with no Unix socket (the socket.io relay): listening is probed there.
        self.tcp_port = tcp_port
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.listening_after = 0.0

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Server:
        """Start the process and wait until its socket accepts a connection."""
        self.socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.started_at = time.perf_counter()
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=log, env=self.env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.argv[1:3]} exited: {tail}")
            unix = self.tcp_port is None
            probe = socket.socket(socket.AF_UNIX if unix else socket.AF_INET, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.socket_path) if unix else ("127.0.0.1", self.tcp_port))
                self.listening_after = time.perf_counter() - self.started_at
                return self
            except OSError:
                time.sleep(0.002)
            finally:
                probe.close()
        self.kill()
        raise RuntimeError(f"{self.argv} did not listen within {START_TIMEOUT} s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process, all its threads included."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # After the command name: state is field 3, utime field 14, stime field 15.
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def rss_kib(self) -> int:
        """VmRSS from /proc/<pid>/status, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS line")


CHECKOUT_VARIABLE = "TURNKEEPER_BENCH_CHECKOUT"
"""Names another checkout whose daemon the benchmarks start (its engine, SDK and daemon sources
first on the daemon's PYTHONPATH), the clients staying this checkout's: before and after a
change, measured by the same scripts in one session."""
DAEMON_ENTRY = ("-m", "turnkeeper.cli")
"""How the daemon is started: its command line, the only door the benchmarks use besides the
protocol, so they keep working whatever changes inside the daemon."""


def daemon_env() -> dict[str, str] | None:
    """The environment of every daemon process: this one's, or with ``CHECKOUT_VARIABLE`` set,
    that checkout's sources first on PYTHONPATH."""
    return checkout_env(os.environ.get(CHECKOUT_VARIABLE))


def checkout_env(checkout: str | None) -> dict[str, str] | None:
    """This process's environment with ``checkout``'s sources first on PYTHONPATH (None, this
    environment as it is, for no checkout)."""
    if not checkout:
        return None
    paths = [str(Path(checkout) / part / "src") for part in ("daemon", "sdk", "engine")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def daemon(
    root: Path,
    *extra: str,
    data_dir: Path | None = None,
    entry: Sequence[str] = DAEMON_ENTRY,
    log_name: str = "daemon.log",
) -> Server:
    """``turnkeeper serve`` with JSON logs (to a file), as an operator would run it; ``entry``
    replaces ``-m turnkeeper.cli`` for a wrapper that runs the same CLI (``traced_serve.py``)."""
    data = data_dir or root / "data"
    sock = root / "run" / "turnkeeper.sock"
    argv = [
        sys.executable,
        *entry,
        "serve",
        "--data-dir",
        str(data),
        "--socket",
        str(sock),
        "--log-format",
        "json",
        *extra,
    ]
    return Server(argv, sock, root / log_name, env=daemon_env())


class PostgresDatabase:
    """A fresh database for one daemon's PostgreSQL store on a local server, dropped by
    ``drop``; ``cpu_seconds`` sums the CPU of its sessions (server processes, read from
    /proc: the server must run on this machine)."""

    def __init__(self, server_dsn: str) -> None:
        import psycopg

        self.server_dsn = server_dsn
        self.name = f"tk_bench_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
        with psycopg.connect(server_dsn, autocommit=True) as db:
            db.execute(f"CREATE DATABASE {self.name}")
        self.dsn = server_dsn.rsplit("/", 1)[0] + "/" + self.name

    def cpu_seconds(self) -> float:
        import psycopg

        with psycopg.connect(self.server_dsn, autocommit=True) as db:
            pids = [
                pid
                for (pid,) in db.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.name,)
                )
            ]
        total = 0.0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue  # a session that ended meanwhile
            total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return total

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.server_dsn, autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


def echo(root: Path) -> Server:
    """The old baseline: a bare anyio + msgpack echo server (``echo_server.py``)."""
    sock = root / "run" / "echo.sock"
    argv = [sys.executable, str(BENCH / "echo_server.py"), "--socket", str(sock)]
    return Server(argv, sock, root / "echo.log")


def asyncio_echo(root: Path) -> Server:
    """Issue 11's baseline: a bare ``asyncio.Protocol`` + msgpack echo (``asyncio_echo.py``)."""
    sock = root / "run" / "asyncio-echo.sock"
    argv = [sys.executable, str(BENCH / "asyncio_echo.py"), "--socket", str(sock)]
    return Server(argv, sock, root / "asyncio-echo.log")


def serve_options() -> list[str]:
    """The long options ``turnkeeper serve --help`` lists, to use one only where it exists."""
    shown = subprocess.run(
        [sys.executable, *DAEMON_ENTRY, "serve", "--help"],
        env=daemon_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    return sorted(set(re.findall(r"--[a-z][a-z0-9-]+", shown.stdout)))


def find_option(options: Sequence[str], *words: str) -> str | None:
    """The first option whose name holds every one of ``words``, if the daemon has one."""
    return next((o for o in options if all(w in o for w in words)), None)


def narrator_token(data_dir: Path, env: dict[str, str] | None = None) -> str:
    """A narrator token made with the real CLI, as an operator would (in ``env``, the
    daemons' environment if None)."""
    made = subprocess.run(
        [sys.executable, *DAEMON_ENTRY, "token", "--data-dir", str(data_dir), "add", "narrator"],
        env=env or daemon_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    return made.stdout.splitlines()[1]


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command_load_parser(description: str) -> argparse.ArgumentParser:
    """The options of the durable-commands workload, shared by the scripts that run it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    return parser


# ------------------------------------------------------------------------------ connection


class Conn:
    """One protocol connection, one call at a time (closed loop), as the daemon serves them."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.decoder = wire.Decoder()
        self.ids = count(1)
        self.incoming: deque[wire.Message | wire.WireError] = deque()
        self.notes: deque[tuple[float, wire.Notification]] = deque(maxlen=MAX_EARLY_NOTES)
        self.skim: Skim | None = None
        """What reads the connection once it ``ask``s (it then only asks)."""

    @classmethod
    async def open(cls, path: Path, *, hello: bool = True) -> Conn:
        with anyio.fail_after(CALL_TIMEOUT):
            conn = cls(await anyio.connect_unix(path))
        if hello:
            params = {
                "protocol": wire.PROTOCOL_VERSION,
                "client": {"name": "bench", "kind": "tool"},
            }
            await conn.call("hello", params)
        return conn

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and return its result; notifications met meanwhile are kept."""
        msgid = next(self.ids)
        await self.stream.send(wire.pack(wire.Request(msgid, method, params or {})))
        with anyio.fail_after(CALL_TIMEOUT):
            while True:
                while self.incoming:
                    item = self.incoming.popleft()
                    if isinstance(item, wire.WireError):
                        raise item
                    if isinstance(item, wire.Notification):
                        self.notes.append((time.time(), item))
                    elif item.msgid == msgid:
                        if item.error is not None:
                            raise CallError(item.error)
                        return item.result
                chunk = await self.stream.receive(RECV_BYTES)
                self.incoming.extend(self.decoder.feed(chunk))

    async def ask(self, method: str, params: dict[str, Any] | None = None) -> None:
        """``call`` for a closed loop that measures the server: its answer is waited for and
        checked (its msgid, its error), and its result skipped, not decoded. Decoding is this
        client's work, not the server's, and it is not the same for every server: a combat's
        view (760 bytes) costs this Python client more to decode and check than the daemon
        spends answering it, the echo's 19-byte answer next to nothing, so a client that
        decodes measures itself on one side only. A connection that asks only asks from then
        on; notifications met meanwhile are kept, as ``call`` keeps them."""
        skim = self.skim
        if skim is None:
            assert not self.incoming, "ask() right after a call() that left messages"
            assert not self.decoder.pending, "ask() right after a call() that left bytes"
            skim = self.skim = Skim()
        msgid = next(self.ids)
        await self.stream.send(wire.pack(wire.Request(msgid, method, params or {})))
        with anyio.fail_after(CALL_TIMEOUT):
            while True:
                while (fields := skim.next()) is not None:
                    if fields[0] == 2:
                        params = fields[2][0] if fields[2] else {}
                        self.notes.append((time.time(), wire.Notification(fields[1], params)))
                    elif fields[1] == msgid:
                        if fields[2] is not None:
                            body = fields[2]
                            raise CallError(wire.ErrorBody(body["code"], body["message"], ""))
                        return
                skim.feed(await self.stream.receive(RECV_BYTES))

    @classmethod
    async def open_ws(cls, port: int, token: str) -> Conn:
        """A session over the daemon's WebSocket endpoint (``--ws``) on loopback."""
        with anyio.fail_after(CALL_TIMEOUT):
            conn = cls(await WebSocketBytes.connect(port))  # type: ignore[arg-type]
        params = {
            "protocol": wire.PROTOCOL_VERSION,
            "client": {"name": "bench", "kind": "tool"},
            "token": token,
        }
        await conn.call("hello", params)
        return conn

    async def aclose(self) -> None:
        await self.stream.aclose()


class Skim:
    """The messages of a byte stream from the daemon, each as its items (type first) with a
    response's result skipped (None): what ``Conn.ask`` reads."""

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False)
        self._length: int | None = None
        self._items: list[Any] = []
        """The message being read: its length and the items read so far (msgpack resumes the
        item it was reading when more bytes come)."""

    def feed(self, data: bytes) -> None:
        self._unpacker.feed(data)

    def next(self) -> list[Any] | None:
        """The next whole message's items, or None until more bytes come."""
        unpacker, items = self._unpacker, self._items
        try:
            if self._length is None:
                self._length = unpacker.read_array_header()
            while len(items) < self._length:
                if len(items) == 3 and items[0] == 1:
                    unpacker.skip()  # a response's result
                    items.append(None)
                else:
                    items.append(unpacker.unpack())
        except msgpack.OutOfData:
            return None
        self._length, self._items = None, []
        return items


_XOR = [bytes(byte ^ key for byte in range(256)) for key in range(256)]
"""For each byte of a masking key, what each byte becomes once masked."""


def _client_frame(data: bytes) -> bytes:
    """``data`` as one binary frame from a client: final, masked by a random key."""
    key = random.randbytes(4)
    size = len(data)
    if size < 126:
        head = bytes((0x82, 0x80 | size))
    elif size < 1 << 16:
        head = b"\x82\xfe" + size.to_bytes(2, "big")
    else:
        head = b"\x82\xff" + size.to_bytes(8, "big")
    payload = bytearray(data)
    for i in range(4):
        payload[i::4] = payload[i::4].translate(_XOR[key[i]])
    return head + key + payload


class WebSocketBytes:
    """A WebSocket client with the face of a byte stream, so ``Conn`` runs over it unchanged:
    each ``send`` is one binary message, ``receive`` gives the bytes of the messages that came.

    wsproto only opens the connection: frames are made and read here, as a browser's native
    code would, because wsproto spends ~25 µs of Python on each message each way, on the two
    cores the daemon being measured also runs on. The daemon sends this client whole binary
    frames only, and a close frame when it stops (read as the end of the stream)."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._buffer = b""

    @classmethod
    async def connect(cls, port: int) -> WebSocketBytes:
        stream = await anyio.connect_tcp("127.0.0.1", port)
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send(ws.send(Request(host=f"127.0.0.1:{port}", target="/ws")))
        # The daemon sends nothing behind its answer before it is asked something.
        while True:
            ws.receive_data(await stream.receive(RECV_BYTES))
            if any(isinstance(e, AcceptConnection) for e in ws.events()):
                return cls(stream)

    async def send(self, data: bytes) -> None:
        await self.stream.send(_client_frame(data))

    async def receive(self, size: int) -> bytes:
        while True:
            data = self._messages()
            if data:
                return data
            self._buffer += await self.stream.receive(size)

    def _messages(self) -> bytes:
        """The payloads of the whole frames received, taken from the buffer."""
        buffer, at, found = self._buffer, 0, []
        while len(buffer) - at >= 2:
            first, size = buffer[at], buffer[at + 1] & 0x7F
            start = at + 2 + {126: 2, 127: 8}.get(size, 0)
            if len(buffer) < start:
                break
            if size >= 126:
                size = int.from_bytes(buffer[at + 2 : start], "big")
            if len(buffer) < start + size:
                break
            if first == 0x88:
                raise anyio.EndOfStream
            if first != 0x82:
                raise ConnectionError(f"the daemon sent an unexpected frame ({first:#x})")
            found.append(buffer[start : start + size])
            at = start + size
        self._buffer = buffer[at:]
        return b"".join(found)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def open_many(
    path: Path, n: int, *, hello: bool = True, ws: tuple[int, str] | None = None
) -> list[Conn]:
    """``n`` connections, opened a few at a time so the listener's backlog never overflows:
    on the Unix socket at ``path``, or over WebSocket to ``ws`` (port, token), there no more at
    once than the daemon lets one address have waiting for their hello."""
    conns: list[Conn] = []
    step = OPEN_BATCH if ws is None else WEB_PENDING_PER_ADDRESS
    for start in range(0, n, step):
        batch: list[Conn | None] = [None] * min(step, n - start)

        async def one(i: int, slots: list[Conn | None] = batch) -> None:
            if ws is not None:
                slots[i] = await Conn.open_ws(*ws)
            else:
                slots[i] = await Conn.open(path, hello=hello)

        async with anyio.create_task_group() as tg:
            for i in range(len(batch)):
                tg.start_soon(one, i)
        conns.extend(c for c in batch if c is not None)
    return conns


# --------------------------------------------------------------------------------- workers


@dataclass
class Workers:
    """Worker processes that get ready (connect, subscribe …), then run when told to go.

    ``target(spec, ready)`` runs in a spawned process; it calls ``ready()`` once set up, blocks
    in ``ready()`` until every worker is ready and the parent says go, and returns a picklable
    result. The parent may act between ``wait_ready`` and ``results`` (the fan-out writer does).
    """

    processes: list[Any]
    queue: Any
    go: Any
    stop: Any

    @classmethod
    def spawn(cls, target: Callable[..., Any], specs: Sequence[dict[str, Any]]) -> Workers:
        ctx = mp.get_context("spawn")
        queue, go, stop = ctx.Queue(), ctx.Event(), ctx.Event()
        processes = [
            ctx.Process(target=_worker_entry, args=(target, spec, queue, go, stop), daemon=True)
            for spec in specs
        ]
        for p in processes:
            p.start()
        return cls(processes, queue, go, stop)

    def _next(self, kind: str, deadline: float) -> Any:
        left = deadline - time.monotonic()
        got_kind, value = self.queue.get(timeout=max(0.1, left))
        if got_kind == "error":
            self.terminate()
            raise RuntimeError(f"a worker failed:\n{value}")
        assert got_kind == kind, (got_kind, kind)
        return value

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WORKER_TIMEOUT
        for _ in self.processes:
            self._next("ready", deadline)

    def start(self) -> None:
        self.go.set()

    def results(self) -> list[Any]:
        deadline = time.monotonic() + WORKER_TIMEOUT
        out = [self._next("result", deadline) for _ in self.processes]
        for p in self.processes:
            p.join(timeout=STOP_TIMEOUT)
        return out

    def terminate(self) -> None:
        for p in self.processes:
            if p.is_alive():
                p.terminate()


def _worker_entry(
    target: Callable[..., Any], spec: dict[str, Any], queue: Any, go: Any, stop: Any
) -> None:
    import traceback

    def ready() -> None:
        queue.put(("ready", None))
        if not go.wait(WORKER_TIMEOUT):
            raise RuntimeError("never told to go")

    try:
        queue.put(("result", target(spec, ready, stop)))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def run_workers(target: Callable[..., Any], specs: Sequence[dict[str, Any]]) -> list[Any]:
    """Spawn, wait until all are ready, say go, collect the results."""
    workers = Workers.spawn(target, specs)
    try:
        workers.wait_ready()
        workers.start()
        return workers.results()
    finally:
        workers.terminate()


def split(n: int, parts: int) -> list[int]:
    """``n`` items over ``parts`` workers, as evenly as possible."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


# --------------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) by nearest rank; NaN when there is nothing to rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt(value: float, digits: int = 2) -> str:
    if value != value:  # NaN
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, so it can be pasted into docs/benchmarks.md as printed."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def machine() -> str:
    """nproc, CPU model, Python and load, for the head of every report."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"nproc={os.cpu_count()}  cpu={model!r}  python={platform.python_version()}  loadavg={load}"
    )


def workdir_root() -> Path:
    """Where every benchmark's scratch directories are: ``$TMPDIR/turnkeeper-bench-<uid>``."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"turnkeeper-bench-{os.getuid()}"


def workdir(name: str) -> Path:
    """A scratch directory for one benchmark, emptied first and removed when the process ends.
    Its name carries the process id: two benchmarks run at once (an A/B pair, two people on
    one machine) would otherwise empty each other's directory and reach each other's daemon."""
    import atexit
    import shutil

    root = workdir_root() / f"{name}-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    atexit.register(shutil.rmtree, root, True)
    return root


# --------------------------------------------------------------------------- closed loops


MAX_CALLS_PER_CONNECTION = 1_000_000
"""A count bound on every closed loop, on top of its time bound."""


@dataclass
class LoopFigures:
    """One closed-loop measurement: every connection sends its next request on each answer."""

    calls_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu: float
    """Share of one core the server used during the window (1.0 = a whole core)."""
    client_cpu: float
    """Share of one core the client processes used together during the window."""
    store_cpu: float = 0.0
    """Share of one core the server's database sessions used (0 for SQLite, inside the server)."""
    extra: list[list[Any]] = field(default_factory=list)
    """What each worker returned beyond its latencies and CPU (``bench_cluster.py``: retries)."""

    @property
    def store_cpu_us_per_call(self) -> float:
        """The database sessions' CPU time per answered call, in µs."""
        return self.store_cpu / self.calls_per_s * 1e6 if self.calls_per_s else float("nan")

    @property
    def cpu_us_per_call(self) -> float:
        """The server's CPU time per answered call, in µs: the figure a shared machine moves
        least, since a busy neighbour slows the rate but not the work per call."""
        return self.server_cpu / self.calls_per_s * 1e6 if self.calls_per_s else float("nan")


async def condition_combat(conn: Conn, combat: str) -> None:
    """Create the combat ``condition_calls`` works on: ``combat``, holding a combatant ``k``."""
    await conn.call(
        "create_combat", {"request_id": f"{combat}-c", "combat_id": combat, "ruleset": "marvel"}
    )
    await conn.call(
        "add_combatant",
        {"request_id": f"{combat}-a", "combat": combat, "id": "k", "display_name": "K"},
    )


def condition_calls(
    combats: dict[int, str], prefix: str = ""
) -> Callable[[Conn, int], Awaitable[None]]:
    """The durable-commands workload for ``closed_loop``: each connection on its own combat
    (``combats[id(conn)]``, holding a combatant ``k``), ``apply_condition`` and
    ``remove_condition`` alternating, each two events, with request ids unique per combat
    (``prefix`` makes them unique per window too)."""
    conditions: dict[int, str] = {}

    async def call(conn: Conn, n: int) -> None:
        combat = combats[id(conn)]
        request_id = f"{prefix}{combat}-{n}"
        if n % 2 == 0:
            result = await conn.call(
                "apply_condition",
                {"combat": combat, "request_id": request_id, "target": "k", "type": "custom"},
            )
            applied = next(e for e in result["events"] if e["event"] == "condition_applied")
            conditions[id(conn)] = applied["condition"]["id"]
        else:
            await conn.call(
                "remove_condition",
                {"combat": combat, "request_id": request_id, "condition": conditions[id(conn)]},
            )

    return call


async def closed_loop(
    conns: Sequence[Any], call: Callable[[Any, int], Any], warmup: float, seconds: float
) -> tuple[list[float], float]:
    """Drive every connection for ``warmup + seconds``; return the latencies (ms) of the calls
    started after the warm-up, and this process's CPU seconds over the measured window."""
    latencies: list[float] = []
    start = time.perf_counter()
    measured_from = start + warmup
    end = measured_from + seconds
    cpu: list[float] = []

    async def drive(conn: Any) -> None:
        for n in range(MAX_CALLS_PER_CONNECTION):
            sent = time.perf_counter()
            if sent >= end:
                return
            await call(conn, n)
            if sent >= measured_from:
                latencies.append((time.perf_counter() - sent) * 1000)

    async def cpu_marks() -> None:
        await anyio.sleep(max(0.0, measured_from - time.perf_counter()))
        cpu.append(time.process_time())
        await anyio.sleep(max(0.0, end - time.perf_counter()))
        cpu.append(time.process_time())

    async with anyio.create_task_group() as tg:
        tg.start_soon(cpu_marks)
        for conn in conns:
            tg.start_soon(drive, conn)
    return latencies, cpu[1] - cpu[0]


def measure_loop(
    server: Server | Sequence[Server],
    worker: Callable[..., Any],
    specs: Sequence[dict[str, Any]],
    warmup: float,
    seconds: float,
    store_cpu: Callable[[], float] | None = None,
) -> LoopFigures:
    """Run closed-loop ``worker`` processes against ``server`` (or several daemons at once,
    their CPU summed); each returns ``(latencies_ms, cpu_seconds, *extra)`` for the window
    ``warmup .. warmup + seconds``. ``store_cpu`` reads the CPU seconds of the server's
    database processes, if it has any (a PostgreSQL store's sessions:
    ``PostgresDatabase.cpu_seconds``)."""
    servers = [server] if isinstance(server, Server) else list(server)

    def server_seconds() -> float:
        return sum(s.cpu_seconds() for s in servers)

    workers = Workers.spawn(worker, specs)
    try:
        workers.wait_ready()
        workers.start()
        time.sleep(warmup)
        cpu_before = server_seconds()
        store_before = store_cpu() if store_cpu else 0.0
        time.sleep(seconds)
        server_cpu = (server_seconds() - cpu_before) / seconds
        store_used = (store_cpu() - store_before) / seconds if store_cpu else 0.0
        results = workers.results()
    finally:
        workers.terminate()
    latencies = [x for lat, *_ in results for x in lat]
    client_cpu = sum(cpu for _, cpu, *_ in results) / seconds
    return LoopFigures(
        len(latencies) / seconds,
        percentile(latencies, 50),
        percentile(latencies, 99),
        server_cpu,
        client_cpu,
        store_used,
        [extra for _, _, *extra in results],
    )


# ----------------------------------------------------------------------------- open loops


MAX_IN_FLIGHT = 10_000
"""Requests one pipelined connection may have unanswered; more means the server has stalled."""


class PipeConn:
    """One protocol connection that sends on a schedule, not on answers (open loop): any number
    of requests may be in flight; a reader task hands each answer to its waiter by msgid."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.waiting: dict[int, tuple[anyio.Event, list[Any]]] = {}

    async def read(self) -> None:
        """Run for the connection's life: deliver answers, keep notifications away."""
        conn = self.conn
        while True:
            try:
                chunk = await conn.stream.receive(RECV_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            at = time.perf_counter()
            for item in conn.decoder.feed(chunk):
                if isinstance(item, wire.WireError):
                    raise item
                if isinstance(item, wire.Notification):
                    continue
                event, slot = self.waiting.pop(item.msgid)
                slot.extend((at, item))
                event.set()

    async def call(self, method: str, params: dict[str, Any]) -> tuple[float, Any]:
        """Send now; return when the answer came (perf_counter) and its result."""
        if len(self.waiting) >= MAX_IN_FLIGHT:
            raise RuntimeError("too many requests in flight")
        msgid = next(self.conn.ids)
        event, slot = anyio.Event(), []
        self.waiting[msgid] = (event, slot)
        await self.conn.stream.send(wire.pack(wire.Request(msgid, method, params)))
        with anyio.fail_after(CALL_TIMEOUT):
            await event.wait()
        at, response = slot
        if response.error is not None:
            raise CallError(response.error)
        return at, response.result


@dataclass
class OpenLoopFigures:
    """One open-loop run, as the client saw it."""

    latencies_ms: list[float]
    """Of the requests scheduled in the window, from their *scheduled* send time; an unanswered
    one counts with its wait until the run gave up on it (a lower bound)."""
    client_cpu_s: float
    scheduled: int
    """Requests scheduled in the measured window."""
    answered_in_window: int
    """Answers that came in the window: below ``scheduled`` when the server falls behind."""
    unanswered: int
    """Requests of the window still unanswered ``OPEN_LOOP_DRAIN`` seconds after it."""


OPEN_LOOP_DRAIN = 5.0
"""Seconds an open loop waits after its window for the answers still due: a server that fell
far behind would otherwise keep the run waiting for its whole backlog."""


async def open_loop(
    conns: Sequence[PipeConn],
    call: Callable[[PipeConn, int], Any],
    rate: float,
    warmup: float,
    seconds: float,
) -> OpenLoopFigures:
    """Offer ``rate`` requests/s in all over ``conns``, each connection in its turn on a fixed
    schedule whatever the answers; ``call(conn, n)`` sends the connection's n-th request and
    returns its answer's perf_counter. Latency runs from the *scheduled* send time, so a late
    send counts against the server."""
    latencies: list[float] = []
    start = time.perf_counter() + 0.1
    measured_from = start + warmup
    end = measured_from + seconds
    per_conn = rate / len(conns)
    cpu: list[float] = []
    scheduled = 0
    in_window = 0
    outstanding: dict[tuple[int, int], float] = {}

    async def one(conn: PipeConn, n: int, due: float) -> None:
        nonlocal in_window
        outstanding[(id(conn), n)] = due
        answered = await call(conn, n)
        del outstanding[(id(conn), n)]
        if due >= measured_from:
            latencies.append((answered - due) * 1000)
        if measured_from <= answered < end:
            in_window += 1

    async def drive(index: int, conn: PipeConn, tg: Any) -> None:
        nonlocal scheduled
        for n in range(MAX_CALLS_PER_CONNECTION):
            due = start + (n + index / len(conns)) / per_conn
            if due >= end:
                return
            await anyio.sleep(max(0.0, due - time.perf_counter()))
            if due >= measured_from:
                scheduled += 1
            tg.start_soon(one, conn, n, due)

    async def cpu_marks() -> None:
        await anyio.sleep(max(0.0, measured_from - time.perf_counter()))
        cpu.append(time.process_time())
        await anyio.sleep(max(0.0, end - time.perf_counter()))
        cpu.append(time.process_time())

    give_up = anyio.current_time() + (end - time.perf_counter()) + OPEN_LOOP_DRAIN
    async with anyio.create_task_group() as tg:
        for conn in conns:
            tg.start_soon(conn.read)
        with anyio.CancelScope(deadline=give_up):
            async with anyio.create_task_group() as calls:
                calls.start_soon(cpu_marks)
                for index, conn in enumerate(conns):
                    calls.start_soon(drive, index, conn, calls)
        cut = time.perf_counter()
        late = [due for due in outstanding.values() if due >= measured_from]
        latencies.extend((cut - due) * 1000 for due in late)
        for conn in conns:
            await conn.conn.aclose()
    return OpenLoopFigures(latencies, cpu[1] - cpu[0], scheduled, in_window, len(late))
