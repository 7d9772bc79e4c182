"""The bare baseline for reads: an ``asyncio.Protocol`` msgpack server answering each request
``[0, id, m, p]`` with ``[1, id, nil, p]``, written straight from ``data_received`` to the
transport. No streams, no tasks per connection, no validation, no logging, no state: the floor of a
round trip in this Python on this machine, which issue 11 measures reads against (the anyio echo,
``echo_server.py``, pays anyio's stream machinery on top).

    python bench/asyncio_echo.py --socket /tmp/echo.sock
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path

import msgpack  # type: ignore[import-untyped]


class _Echo(asyncio.Protocol):
    """One connection: decode what came, answer every request in one write."""

    def __init__(self) -> None:
        self.unpacker = msgpack.Unpacker(raw=False)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        replies = [msgpack.packb([1, m[1], None, m[3]]) for m in self.unpacker if m[0] == 0]
        if replies and self.transport is not None:
            self.transport.write(b"".join(replies))


async def _main(path: Path) -> None:
    path.unlink(missing_ok=True)
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(_Echo, str(path))
    stopped = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    async with server:
        await stopped.wait()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True)
    asyncio.run(_main(parser.parse_args().socket))


if __name__ == "__main__":
    main()
