"""The asynchronous client (anyio): typed methods, event subscriptions and automatic reconnection.

One shape: build the client with :meth:`AsyncClient.unix` or :meth:`AsyncClient.tcp` and enter
it with ``async with``; entering connects and says hello, leaving closes::

    async with AsyncClient.unix(socket_path) as client:  # the daemon's own uid: narrator
        await client.create_combat(combat_id="c1", ruleset="marvel")
        await client.add_combatant("c1", id="hero", display_name="Hero", faces=(6, 6, 6))
        await client.start_combat("c1")
        async with client.subscribe("c1", after=0) as events:
            async for event in events:  # {"combat": "c1", "seq": 1, "event": ..., ...}
                ...

    async with AsyncClient.tcp("127.0.0.1", 7411, token=secret) as client:
        ...

A refused hello on entering raises :class:`CallError` (``unauthenticated``, say); a daemon that
cannot be reached raises :class:`ConnectionLost`.

**Methods.** One per protocol method, named after it. Session and queries: ``hello`` (the
hello result of the current connection: the client says hello itself), ``list_combats``,
``get_combat``, ``history``, ``subscribe``, ``unsubscribe``, ``subscribe_all``,
``unsubscribe_all``, ``list_plugins``. Tables (the operator's, and a hosting bridge's):
``create_table``, ``list_tables``, ``add_token``, ``list_tokens``, ``revoke_token``. Every
engine command is a method whose keyword
parameters are the command's fields (``turnkeeper_engine.commands``), taking the engine's values
(``TurnRef``, ``ActionSpec``, ``Trigger``, ``TriggerFacts``) or the same as plain maps; plus
``combat`` (first, positional; ``create_combat`` names its combat with ``combat_id`` instead),
``request_id`` and ``as_user`` (sent as ``as``: the user a bridge acts for). A command without
``request_id`` gets a fresh one (a uuid4 hex). Fields left at their defaults are not sent.
:meth:`~AsyncClient.call` calls any query or command by its wire name.

**Results** are the protocol's plain data, as decoded: a command returns a
:class:`CommandResult` ``{"combat", "seq", "events"}``, ``get_combat`` a :class:`CombatSnapshot`,
``history`` a :class:`HistoryPage` (typed dicts: keys a newer daemon adds are kept), the other
queries a dict or list as protocol.md describes.

**Errors** (:mod:`turnkeeper_sdk.errors`): an error response raises :class:`CallError` with the
protocol's ``code``, ``message`` and ``field``; every other failure is a
:class:`TurnkeeperError` too (:class:`ConnectionLost`, :class:`CallTimeoutError`,
:class:`TooFarBehindError`).

**Subscriptions.** ``subscribe(combat, after=seq)`` and ``subscribe_all()`` return a
:class:`Subscription`: enter it with ``async with`` (that sends the request; ``.result`` is then
the daemon's answer) and iterate it for event dicts, each with ``combat``, ``seq``, ``event`` and
the event's fields, in seq order per combat. Leaving the block unsubscribes. Each subscription
buffers at most ``event_buffer`` unread events (and, while it fills a gap from ``history``
after a reconnect, as many live events kept aside); an event that finds either full ends it:
the buffered events are still delivered, then :class:`TooFarBehindError` is raised, naming the
last seq delivered per combat. Waiting for the next event has no deadline (a quiet combat is
no fault): bound it with ``anyio.move_on_after`` where needed.

**Reconnection.** When the connection drops (the daemon restarted, was killed, or closed it as
``slow_consumer``), the client reconnects with bounded, randomised backoff for at most
``reconnect_timeout`` seconds, says hello again with the same credentials, subscribes every open
subscription again from the last seq it delivered (``subscribe_all`` fills the gap from
``history``), so no event is missed or duplicated, and then sends every request still waiting
for its answer again: a command with the same ``request_id``, so the daemon applies it at most
once (it remembers request ids per principal, across restarts), a query as it was. A table
method that changes something (``create_table``, ``add_token``, ``revoke_token``: no
``request_id``, so the daemon could not tell a resend) is not sent again once it was sent: it
fails with :class:`ConnectionLost`, and ``list_tables`` or ``list_tokens`` tells whether it was
done. Requests sent
again across a reconnect keep no promised order among themselves: await a command before
sending one that depends on it. A command refused as ``shutting_down`` is sent again the same
way once the daemon is back. If reconnecting does not succeed in time, or the daemon refuses the
repeated hello, every waiter and subscription gets :class:`ConnectionLost`; a command that ends
with ``ConnectionLost`` or ``CallTimeoutError`` carries its ``request_id`` for a safe manual
retry.

Every wait is bounded (the named constants, :mod:`.limits`) except waiting for the next event.
The library logs to the ``turnkeeper_sdk.aio`` logger and never configures logging.

**Inside.** :mod:`.session` is one connection (msgids, the reader), :mod:`.reconnect` the
session kept across drops, :mod:`.subscription` a subscription, :mod:`.types` the results, and
:mod:`.commands` the typed command methods, generated from the method table
(:mod:`turnkeeper_sdk.methods`) by ``python -m turnkeeper_sdk.aio._generate``: never edit it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, cast

import anyio
from anyio.abc import ByteStream

from turnkeeper_engine.commands import COMMANDS
from turnkeeper_engine.plain import to_plain

from ..errors import CallError, CallTimeoutError, ConnectionLost, TooFarBehindError, TurnkeeperError
from ..methods import METHODS
from .commands import CommandMethods
from .limits import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    CALL_TIMEOUT,
    CLOSE_TIMEOUT,
    CONNECT_TIMEOUT,
    EVENT_BUFFER,
    MAX_SENDS,
    RECONNECT_TIMEOUT,
    SEND_TIMEOUT,
)
from .reconnect import ReconnectingSession
from .session import Dropped, Unsent, every_combat, result, subscribe_everywhere
from .subscription import Subscription
from .types import CombatSnapshot, CommandResult, Event, HistoryPage

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "CALL_TIMEOUT",
    "CLOSE_TIMEOUT",
    "CONNECT_TIMEOUT",
    "EVENT_BUFFER",
    "MAX_SENDS",
    "RECONNECT_TIMEOUT",
    "SEND_TIMEOUT",
    "AsyncClient",
    "CallError",
    "CallTimeoutError",
    "CombatSnapshot",
    "CommandResult",
    "ConnectionLost",
    "Event",
    "HistoryPage",
    "Subscription",
    "TooFarBehindError",
    "TurnkeeperError",
]

_SUBSCRIPTION_METHODS = frozenset(
    {"hello", "subscribe", "unsubscribe", "subscribe_all", "unsubscribe_all"}
)
"""Methods whose state the client keeps across reconnects: only their own methods send them."""


SENT_ONCE = frozenset({"create_table", "add_token", "revoke_token"})
"""Table methods that change the token file and take no ``request_id``: sent again after a
lost answer, they would make a second table or token (or refuse a revocation that was done).
One whose connection drops after it was sent fails with ``ConnectionLost`` instead."""


def _new_request_id() -> str:
    return uuid.uuid4().hex


def _plain(value: Any) -> Any:
    """An engine value (record, tuple), or plain data holding some, as wire data."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return to_plain(value)


class AsyncClient(CommandMethods, ReconnectingSession):
    """A session with a Turnkeeper daemon that survives reconnects; see the module docstring.

    Build it with :meth:`unix` or :meth:`tcp` and enter it with ``async with``. ``connect`` opens
    a fresh byte stream to the daemon each time it is called (for other transports). ``token``
    is presented at every hello; ``name`` and ``kind`` tell the daemon what the client is;
    ``locale`` (a BCP 47 tag such as ``"pt-BR"``) asks for the daemon's messages in that language.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[ByteStream]],
        *,
        token: str | None = None,
        name: str = "turnkeeper-sdk",
        kind: str = "tool",
        locale: str | None = None,
        call_timeout: float = CALL_TIMEOUT,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
        event_buffer: int = EVENT_BUFFER,
    ) -> None:
        if event_buffer < 1:
            raise ValueError(f"event_buffer must be at least 1, not {event_buffer}")
        super().__init__(
            connect,
            token=token,
            name=name,
            kind=kind,
            locale=locale,
            call_timeout=call_timeout,
            reconnect_timeout=reconnect_timeout,
        )
        self.event_buffer = event_buffer
        """Unread events each new subscription holds."""

    @classmethod
    def unix(
        cls,
        path: str | os.PathLike[str],
        *,
        token: str | None = None,
        name: str = "turnkeeper-sdk",
        kind: str = "tool",
        locale: str | None = None,
        call_timeout: float = CALL_TIMEOUT,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
        event_buffer: int = EVENT_BUFFER,
    ) -> AsyncClient:
        """A client of the daemon's Unix socket at ``path``. The daemon's own uid is a narrator
        without a token; any other needs ``token``."""

        async def connect() -> ByteStream:
            return await anyio.connect_unix(path)

        return cls(
            connect,
            token=token,
            name=name,
            kind=kind,
            locale=locale,
            call_timeout=call_timeout,
            reconnect_timeout=reconnect_timeout,
            event_buffer=event_buffer,
        )

    @classmethod
    def tcp(
        cls,
        host: str,
        port: int,
        *,
        token: str | None = None,
        name: str = "turnkeeper-sdk",
        kind: str = "tool",
        locale: str | None = None,
        call_timeout: float = CALL_TIMEOUT,
        reconnect_timeout: float = RECONNECT_TIMEOUT,
        event_buffer: int = EVENT_BUFFER,
    ) -> AsyncClient:
        """A client of the daemon's TCP listener; every TCP client needs a ``token``."""

        async def connect() -> ByteStream:
            return await anyio.connect_tcp(host, port)

        return cls(
            connect,
            token=token,
            name=name,
            kind=kind,
            locale=locale,
            call_timeout=call_timeout,
            reconnect_timeout=reconnect_timeout,
            event_buffer=event_buffer,
        )

    # Lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("this client has been entered already")
        self._changed = anyio.Event()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            try:
                self._conn = await self._open()
            except (OSError, TimeoutError) as e:
                raise ConnectionLost(f"cannot connect to the daemon: {e}") from e
            except Dropped:
                raise ConnectionLost("the daemon closed the connection before hello") from None
        except BaseException:
            await self._shut()
            raise
        self._tg.start_soon(self._supervise)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._shut()

    async def _shut(self) -> None:
        self._give_up(ConnectionLost("the client is closed"))
        if self._conn is not None:
            self._conn.drop("the client is closed")
        tg = self._tg
        assert tg is not None
        tg.cancel_scope.cancel()
        # The caller's own exception, if any, propagates as it is: the task group is told none,
        # so it does not wrap it in an exception group.
        await tg.__aexit__(None, None, None)

    @property
    def session(self) -> dict[str, Any]:
        """The current session: ``{"role", "user", "connection", "locale"}`` from its hello."""
        return dict(self._hello.get("session") or {})

    # Requests ------------------------------------------------------------------------------

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request until it is answered, over reconnects; its result, or the error."""
        request_id = params.get("request_id") if method in COMMANDS else None
        try:
            for _ in range(MAX_SENDS):
                conn = await self._connection()
                try:
                    response = await conn.request(method, params, self.call_timeout)
                except Unsent:
                    continue  # the daemon never saw it: sent on the next connection
                except Dropped:
                    if method in SENT_ONCE:
                        raise ConnectionLost(
                            f"{method}: the connection dropped before the answer, and it is not"
                            " sent again, for it may have been done: list_tables and list_tokens"
                            " tell"
                        ) from None
                    continue  # sent again on the next connection, a command as the same request
                error = response.error
                if error is not None and error.code == "shutting_down":
                    # The daemon is stopping and closes this connection once its commands
                    # drain; the command goes again to the daemon that comes back.
                    with anyio.move_on_after(self.call_timeout):
                        await conn.closed.wait()
                    if conn.closed.is_set():
                        continue
                return result(response)
            raise ConnectionLost(
                f"{method}: the connection dropped {MAX_SENDS} times before the answer"
            )
        except (ConnectionLost, CallTimeoutError) as e:
            e.request_id = request_id
            raise

    async def call(self, method: str, **params: Any) -> Any:
        """Call a query or command by its wire name with its wire params; return its result.

        A command without ``request_id`` gets a fresh one. ``hello`` and the subscription
        methods are refused here (``ValueError``): use their own methods, which keep the state
        the client restores after a reconnect.
        """
        if method in _SUBSCRIPTION_METHODS:
            raise ValueError(f"use AsyncClient.{method}() rather than call({method!r})")
        if method in COMMANDS:
            params.setdefault("request_id", _new_request_id())
        return await self._call(method, params)

    async def _command(
        self,
        name: str,
        combat: str | None,
        request_id: str | None,
        as_user: str | None,
        fields: dict[str, Any],
    ) -> CommandResult:
        """Send the command ``name``: the envelope, then every field not at its default."""
        params: dict[str, Any] = {"request_id": request_id or _new_request_id()}
        if combat is not None:
            params["combat"] = combat
        if as_user is not None:
            params["as"] = as_user
        for param in METHODS[name].params:
            value = _plain(fields[param.name])
            # A default left out means the same and keeps working with daemons that predate the
            # field (the API contract only ever adds optional fields).
            if param.required or value != _plain(param.default):
                params[param.name] = value
        return cast(CommandResult, await self._call(name, params))

    # Subscriptions -------------------------------------------------------------------------

    async def _join(self, sub: Subscription) -> None:
        combat = sub.combat
        if (self._all if combat is None else self._subs.get(combat)) is not None:
            raise CallError(
                "already_subscribed",
                "this client follows it already",
                "combat" if combat is not None else "method",
            )
        if combat is None:
            self._all = sub
        else:
            self._subs[combat] = sub
        try:
            if combat is None:
                await self._connection()  # its hello names the daemon's page size
                page = self._limit("max_combat_page")
                sub.result = await subscribe_everywhere(self._call, page)
                for name, seq in sub.result["seqs"].items():
                    sub._last[name] = max(sub._last_seq(name), seq)
            else:
                sub.result = await self._call("subscribe", {"combat": combat, "after": sub._after})
        except BaseException:
            await self._leave(sub)
            raise
        sub._confirmed = True

    async def _leave(self, sub: Subscription, *, tell_daemon: bool = True) -> None:
        sub._end(None)
        if sub.combat is None:
            if self._all is not sub:
                return
            self._all = None
            method, params = "unsubscribe_all", {}
        else:
            if self._subs.get(sub.combat) is not sub:
                return
            del self._subs[sub.combat]
            method, params = "unsubscribe", {"combat": sub.combat}
        conn = self._conn
        # A dropped connection took its subscriptions with it, and the reconnect skips this one.
        if tell_daemon and conn is not None and not conn.closed.is_set():
            await self._unfollow(conn, method, params)

    # Session and queries -------------------------------------------------------------------

    async def hello(self) -> dict[str, Any]:
        """The hello result of the current connection (protocol, server, session, methods,
        events, limits). The client says hello itself on every connection, with its token; the
        daemon would refuse a second one (``hello_repeated``)."""
        await self._connection()
        return dict(self._hello)

    async def list_combats(
        self, *, after: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Combats in id order: ``{"combat", "ruleset", "phase", "round", "seq"}``, or
        ``{"combat", "quarantined"}`` for a quarantined one. Those whose ids sort after
        ``after`` (every one by default); with ``limit``, one page of at most that many
        (page on with ``after`` = the last row's ``combat``), otherwise all of them, read a
        page at a time."""
        if limit is not None:
            params: dict[str, Any] = {"limit": limit}
            if after is not None:
                params["after"] = after
            return cast(list[dict[str, Any]], await self._call("list_combats", params))
        await self._connection()
        return await every_combat(self._call, self._limit("max_combat_page"), after)

    async def get_combat(self, combat: str) -> CombatSnapshot:
        """A combat as the caller may see it, with the last seq its view includes."""
        return cast(CombatSnapshot, await self._call("get_combat", {"combat": combat}))

    async def history(
        self, combat: str, *, after: int = 0, limit: int | None = None
    ) -> HistoryPage:
        """Recorded events after ``after`` as the caller may see them; ``limit`` (1 to 1000)
        recorded events at most, the daemon's default (100) if not given."""
        params: dict[str, Any] = {"combat": combat, "after": after}
        if limit is not None:
            params["limit"] = limit
        return cast(HistoryPage, await self._call("history", params))

    def subscribe(self, combat: str, *, after: int = 0) -> Subscription:
        """The events of ``combat`` after seq ``after`` (missed ones first, then live ones).

        Use as ``async with client.subscribe(combat, after=seq) as events: async for event in
        events: ...``; entering refuses a combat this client follows already
        (``already_subscribed``), and raises what the daemon answers (``too_far_behind`` more
        than 1000 events back: read ``get_combat`` and subscribe from its ``seq``).
        """
        return Subscription(self, combat, after, self.event_buffer)

    async def unsubscribe(self, combat: str) -> dict[str, Any]:
        """Stop the events of ``combat``: its subscription's iteration ends."""
        sub = self._subs.get(combat)
        if sub is not None:
            await self._leave(sub, tell_daemon=False)
        return cast(dict[str, Any], await self._call("unsubscribe", {"combat": combat}))

    def subscribe_all(self) -> Subscription:
        """The live events of every combat, combats created later included, from the moment of
        the answer on. Use like :meth:`subscribe`; ``result["seqs"]`` then holds each combat's
        last seq (read page after page with ``list_combats`` where the daemon's answer names a
        page only)."""
        return Subscription(self, None, 0, self.event_buffer)

    async def list_plugins(self) -> dict[str, Any]:
        """The daemon's plugins: ``{"loaded": [...], "failed": [...], "skipped": [...]}``, the
        loaded ones with their hooks, what they provide and their call counters."""
        return cast(dict[str, Any], await self._call("list_plugins", {}))

    async def create_table(self, name: str) -> dict[str, Any]:
        """Make a table, managed by the caller: ``{"table", "name", "created"}``. Its combats
        are named ``TABLE/NAME``."""
        return cast(dict[str, Any], await self._call("create_table", {"name": name}))

    async def list_tables(self) -> list[dict[str, Any]]:
        """The tables the caller manages: ``[{"table", "name", "created"}]``."""
        return cast(list[dict[str, Any]], await self._call("list_tables", {}))

    async def add_token(
        self, table: str, role: str, *, user: str | None = None, narrator: bool = False
    ) -> dict[str, Any]:
        """Make a token of ``table``: ``{"id", "table", "role", "user", "narrator", "host",
        "created", "secret"}``; the secret is in this answer only."""
        params: dict[str, Any] = {"table": table, "role": role}
        if user is not None:
            params["user"] = user
        if narrator:
            params["narrator"] = True
        return cast(dict[str, Any], await self._call("add_token", params))

    async def list_tokens(self, table: str) -> list[dict[str, Any]]:
        """The tokens of ``table`` (never their secrets)."""
        return cast(list[dict[str, Any]], await self._call("list_tokens", {"table": table}))

    async def revoke_token(self, table: str, token_id: str) -> dict[str, Any]:
        """Revoke a token of ``table``: its sessions end. ``{"id", "table"}``."""
        params = {"table": table, "id": token_id}
        return cast(dict[str, Any], await self._call("revoke_token", params))

    async def unsubscribe_all(self) -> dict[str, Any]:
        """Stop ``subscribe_all``: its iteration ends; per-combat subscriptions go on."""
        if self._all is not None:
            await self._leave(self._all, tell_daemon=False)
        return cast(dict[str, Any], await self._call("unsubscribe_all", {}))
