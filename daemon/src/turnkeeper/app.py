"""The daemon's composition root: the store, the plugins, the hub, the watchdog, the listeners and
the signals, put together for one data directory, and taken apart in order on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import structlog
from anyio.abc import TaskStatus

from .auth import TOKEN_FILE
from .combats import Hub
from .combats.rebuild import SNAPSHOT_EVERY
from .loader import PluginChoice, announce, load
from .private import PRIVATE_FILE
from .stores import is_postgresql, open_store, open_tokens
from .transport.channel import TcpChannel, UnixChannel
from .transport.listeners import (
    ConnectionLimits,
    address,
    listen_tcp,
    listen_unix,
    prepare_socket_path,
    remove_own_socket,
)
from .transport.session import Sessions
from .watchdog import Watchdog

log = structlog.get_logger("turnkeeper.app")

DRAIN_TIMEOUT = 10.0
"""On SIGTERM, how long in-flight commands get to finish before the daemon exits."""


@dataclass
class Config:
    """What ``turnkeeper serve`` was asked to run."""

    data_dir: Path
    socket_path: Path | None
    tcp_host: str | None = None
    tcp_port: int | None = None
    narrator_uid: int | None = field(default_factory=os.getuid)
    """Unix peers with this uid are narrators without a token; None turns that off."""
    snapshot_every: int = SNAPSHOT_EVERY
    max_db_mib: int | None = None
    """A quota on the store, in MiB (SQLite: the database and its WAL together; PostgreSQL: the
    store's tables and indexes); past it commits fail with ``store_full``."""
    store: str | None = None
    """A ``postgresql://`` URI to keep combats in PostgreSQL; None keeps them in SQLite in
    ``data_dir`` (``turnkeeper.stores.open_store``)."""
    lease_seconds: float | None = None
    """How long a combat's lease outlives this daemon's last renewal, on PostgreSQL; None for
    the store's default (``turnkeeper.stores.postgresql.LEASE_SECONDS``)."""
    plugins: PluginChoice = field(default_factory=PluginChoice)
    """Which plugins to load: every installed one by default."""
    ws_host: str | None = None
    ws_port: int | None = None
    """Where the WebSocket endpoint listens (``/ws``); None leaves it off."""
    page: bool = False
    """Whether the WebSocket listener also serves the table view (``--http``)."""
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    """How many sessions the daemon holds (``--max-connections``, ``--max-web-connections``)."""


async def _listening(server: asyncio.Server) -> None:
    """Keep ``server`` accepting until cancelled, then close it."""
    async with server:
        await server.serve_forever()


async def serve(
    config: Config, *, task_status: TaskStatus[Sessions] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Run the daemon until SIGTERM or SIGINT, then drain in-flight commands and return."""
    plugins = load(config.plugins)
    announce(plugins)
    store = open_store(
        config.store,
        config.data_dir,
        max_mib=config.max_db_mib,
        lease_seconds=config.lease_seconds,
        address=address(config.tcp_host, config.tcp_port) if config.tcp_port else None,
    )
    hub = Hub(store, snapshot_every=config.snapshot_every, plugins=plugins)
    tokens = open_tokens(config.store, config.data_dir)
    if is_postgresql(config.store) and (config.data_dir / TOKEN_FILE).exists():
        # Its tokens would seem to work and do not: say so, and how to bring them over.
        log.warning(
            "token_file_not_used",
            path=str(config.data_dir / TOKEN_FILE),
            hint="the tables and tokens are in the database: turnkeeper token import",
        )
    bound: os.stat_result | None = None  # the socket this daemon made, the only one it removes
    socket_lock: int | None = None
    try:
        # A malformed token file (or a database that cannot be read) stops the start, saying
        # what is wrong; once running, the daemon keeps its last good tokens through a bad
        # edit (``Tokens.load``) or a lost database (``SharedTokens``).
        tokens.read()
        async with anyio.create_task_group() as outer:
            await outer.start(store.run)
            await hub.recover()  # before any listener: every combat is known when serving
            async with anyio.create_task_group() as tg:
                sessions = Sessions(
                    hub,
                    tokens,
                    narrator_uid=config.narrator_uid,
                    limits=config.limits,
                    task_group=tg,
                )
                tg.start_soon(hub.run_clock)
                tg.start_soon(hub.run_hooks)
                tg.start_soon(hub.run_releases)
                tg.start_soon(hub.run_adoption)
                await tg.start(hub.run_follow)  # listening before serving: no commit unheard
                tg.start_soon(Watchdog(plugins).run)
                tg.start_soon(hub.warm)
                await tg.start(tokens.run)  # listening before serving: no change unheard
                tg.start_soon(sessions.watch_tokens)
                tg.start_soon(sessions.run)
                if config.socket_path is not None:
                    socket_lock = prepare_socket_path(config.socket_path)
                if config.tcp_port is not None:
                    tcp = await listen_tcp(
                        config.tcp_host, config.tcp_port, "TCP", lambda: TcpChannel(sessions.accept)
                    )
                    tg.start_soon(_listening, tcp)
                web_address = None
                if config.ws_port is not None:
                    # Imported here: HTTP and WebSocket (h11, wsproto, the page's files) cost a
                    # daemon without --ws or --http ~15 ms of its start.
                    from .transport.websocket import Gate, Site, WebSocketChannel

                    gate = Gate(Site() if config.page else None)
                    web = await listen_tcp(
                        config.ws_host,
                        config.ws_port,
                        "WebSocket",
                        lambda: WebSocketChannel(gate, sessions.accept),
                    )
                    web_address = address(config.ws_host, config.ws_port)
                    tg.start_soon(_listening, web)
                if config.socket_path is not None:
                    # The Unix socket last: a client (a test, a supervisor) that reaches it
                    # finds every other listener open too.
                    unix = await listen_unix(
                        config.socket_path, lambda: UnixChannel(sessions.accept)
                    )
                    bound = os.lstat(config.socket_path)
                    os.chmod(config.socket_path, PRIVATE_FILE)
                    tg.start_soon(_listening, unix)
                log.info(
                    "serving",
                    socket=str(config.socket_path),
                    tcp_port=config.tcp_port,
                    ws_port=config.ws_port,
                    page=config.page,
                    websocket=f"ws://{web_address}/ws" if web_address else None,
                    table_view=f"http://{web_address}/" if web_address and config.page else None,
                    # "uvloop" or "asyncio" (``serve --loop``): which one a deployment runs.
                    loop=type(asyncio.get_running_loop()).__module__.partition(".")[0],
                )
                task_status.started(sessions)
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        log.info("stopping", signal=signal.Signals(signum).name)
                        break
                sessions.draining = True
                with anyio.move_on_after(DRAIN_TIMEOUT):
                    while sessions.in_flight:
                        await anyio.sleep(0.01)
                # Commands still in flight (in a before hook, say) go on without plugins.
                plugins.stop()
                tg.cancel_scope.cancel()
            await store.stop()
    finally:
        tokens.close()
        store.close()
        if bound is not None and config.socket_path is not None:
            remove_own_socket(config.socket_path, bound)
        if socket_lock is not None:
            os.close(socket_lock)
    log.info("stopped")
