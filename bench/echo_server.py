"""The baseline server: anyio + msgpack, answering each request ``[0, id, m, p]`` with
``[1, id, nil, p]``. No validation, no logging, no state: the floor any daemon on the same
stack pays for a round trip.

    python bench/echo_server.py --socket /tmp/echo.sock
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from pathlib import Path

import anyio
import msgpack  # type: ignore[import-untyped]
from anyio.abc import ByteStream

READ_CHUNK = 65536


async def _client(stream: ByteStream) -> None:
    unpacker = msgpack.Unpacker(raw=False)
    async with stream:
        while True:
            try:
                chunk = await stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            unpacker.feed(chunk)
            replies = [msgpack.packb([1, m[1], None, m[3]]) for m in unpacker if m[0] == 0]
            if replies:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await stream.send(b"".join(replies))


async def _main(path: Path) -> None:
    path.unlink(missing_ok=True)
    listener = await anyio.create_unix_listener(path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _client)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
        tg.cancel_scope.cancel()
    path.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True)
    anyio.run(_main, parser.parse_args().socket)


if __name__ == "__main__":
    main()
