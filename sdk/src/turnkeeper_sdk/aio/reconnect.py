"""The session kept across drops: connecting and saying hello, routing events to their
subscriptions, and, after a drop, reconnecting with bounded, randomised backoff, subscribing
again from the last seq delivered and filling ``subscribe_all``'s gap from ``history``."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import ByteStream, TaskGroup

from .. import wire
from ..errors import CallError, ConnectionLost, TurnkeeperError
from .limits import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    CLOSE_TIMEOUT,
    CONNECT_TIMEOUT,
    FALLBACK_COMBAT_PAGE,
    FALLBACK_HISTORY_PAGE,
)
from .session import Connection, Dropped, result, subscribe_everywhere
from .subscription import Subscription

log = logging.getLogger(__name__)


class ReconnectingSession:
    """A session with a daemon that survives reconnects: the base of
    :class:`~turnkeeper_sdk.aio.AsyncClient`, which adds requests, subscriptions and methods.

    ``connect`` opens a fresh byte stream to the daemon each time it is called; ``token``,
    ``name``, ``kind`` and ``locale`` are said at every hello.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[ByteStream]],
        *,
        token: str | None,
        name: str,
        kind: str,
        locale: str | None,
        call_timeout: float,
        reconnect_timeout: float,
    ) -> None:
        self.call_timeout = call_timeout
        """Seconds a request waits for its answer on an open connection."""
        self.reconnect_timeout = reconnect_timeout
        """Seconds to reconnect after a drop before giving up; 0 turns reconnecting off."""
        self._connect = connect
        self._token = token
        self._name = name
        self._kind = kind
        self._locale = locale
        self._hello: dict[str, Any] = {}
        self._conn: Connection | None = None
        self._changed: anyio.Event
        """Set, and replaced, each time a connection is ready or the client gives up."""
        self._lost: ConnectionLost | None = None
        self._subs: dict[str, Subscription] = {}
        self._all: Subscription | None = None
        self._tg: TaskGroup | None = None

    async def _open(self) -> Connection:
        """A fresh connection with its reader running and hello said."""
        with anyio.fail_after(CONNECT_TIMEOUT):
            stream = await self._connect()
        conn = Connection(stream)
        assert self._tg is not None
        self._tg.start_soon(conn.read, self._on_event)
        params: dict[str, Any] = {
            "protocol": wire.PROTOCOL_VERSION,
            "client": {"name": self._name, "kind": self._kind},
        }
        if self._token is not None:
            params["token"] = self._token
        if self._locale is not None:
            params["locale"] = self._locale
        try:
            self._hello = result(await conn.request("hello", params, self.call_timeout))
        except BaseException:
            conn.drop("hello failed")
            raise
        return conn

    def _on_event(self, params: dict[str, Any]) -> None:
        """An event notification, to the subscriptions that follow its combat."""
        combat = params.get("combat")
        sub = self._subs.get(combat) if isinstance(combat, str) else None
        if sub is not None:
            sub._push(params)
        if self._all is not None:
            # A copy: each subscriber may keep or change what it receives.
            self._all._push(dict(params))

    async def _connection(self) -> Connection:
        """The open connection, waiting (at most ``reconnect_timeout``) for a reconnect."""
        with anyio.move_on_after(self.reconnect_timeout):
            while True:
                if self._lost is not None:
                    raise ConnectionLost(str(self._lost), self._lost.code)
                conn = self._conn
                if conn is None:
                    raise RuntimeError("enter the client with `async with` first")
                if not conn.closed.is_set():
                    return conn
                await self._changed.wait()
        raise ConnectionLost(f"not reconnected within {self.reconnect_timeout:g} s")

    async def _supervise(self) -> None:
        """Bring the session back after every drop, until the client closes or gives up."""
        while True:
            conn = self._conn
            assert conn is not None
            # No deadline: a healthy session stays open for as long as it is used.
            await conn.closed.wait()
            if self._lost is not None:
                return
            log.info("connection lost (%s); reconnecting", conn.reason)
            try:
                self._conn = await self._reconnect(conn)
            except ConnectionLost as lost:
                log.warning("giving up: %s", lost)
                self._give_up(lost)
                return
            except Exception as e:
                # A bug here must not take the caller's task group down: report it and stop.
                log.exception("reconnecting failed")
                self._give_up(ConnectionLost(f"reconnecting failed: {e!r}"))
                return
            log.info("reconnected")
            self._changed.set()
            self._changed = anyio.Event()

    async def _reconnect(self, old: Connection) -> Connection:
        delay = BACKOFF_FIRST
        failure: BaseException | None = None
        with anyio.move_on_after(self.reconnect_timeout):
            while True:
                try:
                    conn = await self._open()
                except CallError as refused:
                    # The daemon is there but refuses these credentials now (a revoked token,
                    # say): trying again cannot help.
                    raise ConnectionLost(
                        f"{old.reason}; hello was refused on reconnecting: {refused}",
                        refused.code,
                    ) from refused
                except (OSError, TimeoutError, Dropped) as e:
                    failure = e
                else:
                    try:
                        await self._resubscribe(conn)
                        return conn
                    except (TimeoutError, Dropped) as e:
                        conn.drop()
                        failure = e
                    except BaseException:
                        conn.drop()  # out of time, or a bug: never leave a half-restored session
                        raise
                await anyio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, BACKOFF_MAX)
        raise ConnectionLost(
            f"{old.reason}; not reconnected within {self.reconnect_timeout:g} s", old.code
        ) from failure

    async def _resubscribe(self, conn: Connection) -> None:
        """Follow again, on a fresh connection, what was followed: each combat from the last seq
        its subscription delivered, so nothing is missed and nothing comes twice."""
        for combat, sub in list(self._subs.items()):
            if not sub._confirmed or sub._ended:
                continue  # one still being opened is sent again by its own caller
            params = {"combat": combat, "after": sub._last_seq(combat)}
            try:
                result(await conn.request("subscribe", params, self.call_timeout))
            except CallError as refused:
                if refused.code == "too_far_behind":
                    sub._fail_behind(f"too far behind to resume after a reconnect ({refused})")
                else:
                    sub._end(refused)
                continue
            if self._subs.get(combat) is not sub:  # left while this was being sent
                await self._unfollow(conn, "unsubscribe", {"combat": combat})
        everything = self._all
        if everything is not None and everything._confirmed and not everything._ended:
            await self._resubscribe_all(conn, everything)

    async def _resubscribe_all(self, conn: Connection, sub: Subscription) -> None:
        """``subscribe_all`` has no ``after``: subscribe, then read what each combat recorded
        while disconnected from ``history``, holding live events back until the gap is filled."""
        sub._hold()

        async def ask(method: str, params: dict[str, Any]) -> Any:
            return result(await conn.request(method, params, self.call_timeout))

        try:
            seqs = (await subscribe_everywhere(ask, self._limit("max_combat_page")))["seqs"]
        except CallError as refused:
            sub._end(refused)
            return
        page = self._limit("max_history_page")
        for combat, seq in seqs.items():
            after = sub._last_seq(combat)
            while after < seq and not sub._ended:
                params = {"combat": combat, "after": after, "limit": page}
                try:
                    got = result(await conn.request("history", params, self.call_timeout))
                except CallError as refused:
                    if refused.code == "combat_quarantined":
                        break  # unreadable for everyone until the operator repairs it
                    sub._end(refused)
                    return
                for event in got["events"]:
                    sub._deliver({"combat": combat, **event})
                if got["until"] <= after:
                    break
                after = got["until"]
        sub._release()
        if self._all is not sub:  # left while this was being sent
            await self._unfollow(conn, "unsubscribe_all", {})

    async def _unfollow(self, conn: Connection, method: str, params: dict[str, Any]) -> None:
        """Stop the daemon's events for a subscription left here; best effort, bounded."""
        # Shielded: a subscription left because its task was cancelled must still be stopped,
        # or a later subscribe to the same combat would be refused as already_subscribed.
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(CLOSE_TIMEOUT),
            contextlib.suppress(TurnkeeperError, Dropped),
        ):
            await conn.request(method, params, CLOSE_TIMEOUT)

    def _give_up(self, lost: ConnectionLost) -> None:
        if self._lost is not None:
            return
        self._lost = lost
        for sub in [*self._subs.values(), *([self._all] if self._all else [])]:
            sub._end(ConnectionLost(str(lost), lost.code))
        if self._tg is not None:
            self._changed.set()

    def _limit(self, name: str) -> int:
        """A page size the daemon's hello names (``max_combat_page``, ``max_history_page``),
        or one every daemon takes."""
        limits = self._hello.get("limits")
        value = limits.get(name) if isinstance(limits, dict) else None
        if isinstance(value, int) and value >= 1:
            return value
        return FALLBACK_COMBAT_PAGE if name == "max_combat_page" else FALLBACK_HISTORY_PAGE
