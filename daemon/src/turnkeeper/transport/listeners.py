"""The listening sockets and who may connect: connection limits, counted per transport.

Connections are counted in two kinds, so that neither a flood of connections that never say
``hello`` nor a crowd of token holders can lock the narrator out: sessions (said hello) and
pending ones (not yet), each bounded per transport and, on TCP and WebSocket, per peer address.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from turnkeeper_engine.errors import Arg, TemplatedError
from turnkeeper_sdk import wire

from ..private import LockHeldError, exclusive_lock, private_directory
from .channel import Channel

log = structlog.get_logger("turnkeeper.listeners")

MAX_CONNECTIONS = 1024
"""Concurrent sessions (connections that have said hello) by default (``--max-connections``);
beyond, a newcomer is told ``server_busy`` and closed. Room for a table view open in 500
browsers, and the bridges and tools beside them."""
MAX_WEB_CONNECTIONS = 768
"""Of those, the most that WebSocket may hold by default (``--max-web-connections``): a port
open to browsers must not be able to take every slot from bridges on TCP and the narrator's own
tools on the Unix socket."""
UNIX_RESERVE = 32
"""Of those, the sessions only the Unix socket may take: however many token holders connect over
TCP and WebSocket, the narrator's own tools still get in."""
MAX_PENDING = 64
"""Connections that have not said hello yet, per TCP or WebSocket listener, counted apart from the
sessions: a flood of connections that never say hello fills this share of its own listener and no
more, and each one leaves after ``session.HELLO_TIMEOUT``. The Unix socket's peers are the
daemon's own user (the socket is 0600): they may have as many waiting as there are sessions."""
MAX_PENDING_PER_ADDRESS = 8
"""Of a TCP or WebSocket listener's pending share, the most one peer address may hold, so that
one host cannot take the whole share."""
BACKLOG = 4096
"""Connections the kernel may hold for a listener before they are accepted: a burst of clients
(a table's browsers opening at once) must not see refusals the limits above would not make."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How many sessions the daemon holds, in all and over WebSocket."""

    sessions: int = MAX_CONNECTIONS
    web_sessions: int = MAX_WEB_CONNECTIONS


class Admission:
    """Who may connect, and who may become a session, now."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.sessions: Counter[str] = Counter()
        """Connections that have said hello, by transport."""
        self.pending: Counter[str] = Counter()
        """Connections that have not said hello yet, by listener (transport)."""
        self.pending_from: Counter[str] = Counter()
        """The same, on TCP and WebSocket, by peer address."""

    def session_refusal(self, kind: str) -> wire.WireError | None:
        """``server_busy`` if a connection over ``kind`` cannot become a session now."""
        most = self.limits.sessions
        limit = most
        taken = sum(self.sessions.values())
        if kind != "unix" and taken < most:
            limit = most - UNIX_RESERVE
            taken = taken - self.sessions["unix"]
        if kind == "ws" and taken < limit:
            limit, taken = self.limits.web_sessions, self.sessions["ws"]
        if taken < limit:
            return None
        return wire.WireError("server_busy", "more than {count} connections", count=limit)

    def admit(self, channel: Channel) -> wire.WireError | None:
        """Count ``channel`` as pending, or say why it may not even wait for its hello."""
        busy = self.session_refusal(channel.kind)
        if busy is not None:
            return busy
        limit = self.limits.sessions if channel.kind == "unix" else MAX_PENDING
        if self.pending[channel.kind] >= limit:
            return wire.WireError(
                "server_busy",
                "{count} connections are waiting for their hello here already",
                count=limit,
            )
        address = channel.address
        if address is not None and self.pending_from[address] >= MAX_PENDING_PER_ADDRESS:
            return wire.WireError(
                "server_busy",
                "{count} connections from this address are waiting for their hello already",
                count=MAX_PENDING_PER_ADDRESS,
            )
        self.pending[channel.kind] += 1
        if address is not None:
            self.pending_from[address] += 1
        return None

    def promote(self, channel: Channel) -> None:
        """Count ``channel``, which has just said hello, as a session rather than pending."""
        self.leave(channel, session=False)
        self.sessions[channel.kind] += 1

    def leave(self, channel: Channel, *, session: bool) -> None:
        """Stop counting ``channel``, a session or a pending connection."""
        if session:
            self.sessions[channel.kind] -= 1
            return
        self.pending[channel.kind] -= 1
        address = channel.address
        if address is not None:
            self.pending_from[address] -= 1
            if not self.pending_from[address]:
                del self.pending_from[address]


Factory = Callable[[], Channel]


async def listen_unix(path: Path, factory: Factory) -> asyncio.Server:
    """Listen on the Unix socket ``path`` (made ready by ``prepare_socket_path``)."""
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(factory, str(path), backlog=BACKLOG)


async def listen_tcp(host: str | None, port: int, what: str, factory: Factory) -> asyncio.Server:
    """A TCP listener; failing, an error that names the address (the port is in use, or
    needs privileges)."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.create_server(
            factory, host or "127.0.0.1", port, backlog=BACKLOG, reuse_address=True
        )
    except OSError as e:
        # asyncio words the error itself, with the address: the system's words are enough.
        reason = os.strerror(e.errno) if e.errno else str(e)
        where = address(host, port)
        raise OSError(e.errno, f"cannot listen for {what} on {where}: {reason}") from e


def address(host: str | None, port: int) -> str:
    """``HOST:PORT`` as a URL writes it (an IPv6 host in brackets)."""
    host = host or "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class SocketPathError(TemplatedError):
    """The Unix socket's path is another's (a live daemon's socket, or a file that is not a
    socket of this user): refused, and never replaced."""

    def __init__(self, template: str, **args: Arg) -> None:
        super().__init__(template, args)


def prepare_socket_path(path: Path) -> int:
    """Make ready to bind ``path``; return its lock, to close once the socket is removed.

    The socket's directory is made private (see ``turnkeeper.private``: in a shared place like
    /tmp another user could have made it first, to catch the socket). ``<path>.lock`` is held by
    the daemon serving on the path, so a second one is refused (``SocketPathError``, naming the
    first one's pid) before it looks at the socket, even while the first is still binding. A
    socket of this user that no daemon answers on is then a dead daemon's, and is removed;
    anything else on the path is left alone and refused.
    """
    private_directory(
        path.parent, "socket directory", lambda name: name in (path.name, path.name + ".lock")
    )
    try:
        lock = exclusive_lock(path.with_name(path.name + ".lock"))
    except LockHeldError as e:
        raise SocketPathError(
            "a daemon (pid {pid}) is already listening on {path}", pid=e.holder, path=str(path)
        ) from None
    try:
        _remove_stale_socket(path)
    except BaseException:
        os.close(lock)
        raise
    return lock


def _remove_stale_socket(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise SocketPathError(
            "{path} exists and is not a socket of this user: not replaced", path=str(path)
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # A daemon of a version without the lock may still answer on it.
        probe.connect(str(path))
    except OSError as e:
        if e.errno in (errno.ECONNREFUSED, errno.ENOENT):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            log.warning("stale_socket_removed", path=str(path))
            return
        raise
    finally:
        probe.close()
    raise SocketPathError("a daemon is already listening on {path}", path=str(path))


def remove_own_socket(path: Path, made: os.stat_result) -> None:
    """Unlink the socket this daemon bound, unless the path has since become another file (a
    later daemon's socket, after this one's was removed by hand)."""
    with contextlib.suppress(FileNotFoundError):
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino):
            path.unlink()
