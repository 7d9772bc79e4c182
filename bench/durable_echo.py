"""The floor of a durable command on this disk: ``asyncio_echo.py``'s ``asyncio.Protocol`` +
msgpack server, answering each request ``[0, id, m, p]`` with ``[1, id, nil, p]`` only once the
request is committed to SQLite (WAL, ``synchronous=FULL``, as the daemon's store) in a thread of
its own, every request received while the last transaction ran written together in one (group
commit): one row per request, its params as msgpack, in a table with a rowid key. No state,
validation, events, remembered answers or checkpoints beyond SQLite's own: what the disk and one
group-committing thread allow, the floor ``bench_latency.py`` reports the daemon's p99 against.

    python bench/durable_echo.py --socket /tmp/echo.sock --data-dir /tmp/echo-data
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sqlite3
import threading
from collections import deque
from pathlib import Path

import msgpack  # type: ignore[import-untyped]


class _Committer:
    """The one thread that writes: takes everything queued, one transaction, then answers."""

    def __init__(self, path: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, body BLOB)")
        self.loop = loop
        self.queue: deque[tuple[_Echo, int, bytes] | None] = deque()
        self.ready = threading.Condition()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def put(self, item: tuple[_Echo, int, bytes]) -> None:
        with self.ready:
            self.queue.append(item)
            self.ready.notify()

    def close(self) -> None:
        with self.ready:
            self.queue.append(None)
            self.ready.notify()
        self.thread.join()
        self.db.close()

    def _serve(self) -> None:
        while True:
            with self.ready:
                while not self.queue:
                    self.ready.wait()
                group = list(self.queue)
                self.queue.clear()
            done = [item for item in group if item is not None]
            if done:
                self.db.execute("BEGIN IMMEDIATE")
                self.db.executemany(
                    "INSERT INTO requests (body) VALUES (?)", [(body,) for _, _, body in done]
                )
                self.db.execute("COMMIT")
                self.loop.call_soon_threadsafe(_answer, done)
            if len(done) < len(group):
                return


def _answer(done: list[tuple[_Echo, int, bytes]]) -> None:
    """Write the answers of one transaction, one write per connection."""
    by_connection: dict[_Echo, list[bytes]] = {}
    for echo, msgid, body in done:
        by_connection.setdefault(echo, []).append(
            msgpack.packb([1, msgid, None, msgpack.unpackb(body)])
        )
    for echo, replies in by_connection.items():
        if echo.transport is not None and not echo.transport.is_closing():
            echo.transport.write(b"".join(replies))


class _Echo(asyncio.Protocol):
    """One connection: decode what came and queue every request for the committer."""

    def __init__(self, committer: _Committer) -> None:
        self.committer = committer
        self.unpacker = msgpack.Unpacker(raw=False)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        for m in self.unpacker:
            if m[0] == 0:
                self.committer.put((self, m[1], msgpack.packb(m[3])))


async def _main(path: Path, data_dir: Path) -> None:
    path.unlink(missing_ok=True)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    committer = _Committer(data_dir / "echo.db", loop)
    server = await loop.create_unix_server(lambda: _Echo(committer), str(path))
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    async with server:
        await stopped.wait()
    committer.close()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_main(args.socket, args.data_dir))


if __name__ == "__main__":
    main()
