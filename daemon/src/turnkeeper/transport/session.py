"""Sessions: hello, credentials, language, subscriptions, and the method table.

A session reads one message at a time from its channel and answers it before reading the next,
so responses come in request order. Each method's behaviour is one entry of ``HANDLERS``, keyed
by the names ``turnkeeper.methods`` declares; ``Session.answer`` is the one place where a
request's failure becomes a wire error: every refusal is a ``ProtocolError`` (the engine's
family: the pipeline's, the codec's, the store's, the tokens' and the daemon's own), told in
the session's language by ``Session.body`` alone.
"""

from __future__ import annotations

import contextvars
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from itertools import count
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from turnkeeper_engine import Actor
from turnkeeper_engine import commands as cmd
from turnkeeper_engine.errors import ProtocolError
from turnkeeper_engine.events import EVENTS
from turnkeeper_engine.model import maker
from turnkeeper_engine.plain import Plain
from turnkeeper_sdk import wire

from .. import __version__, i18n
from ..auth import AuthError, Principal, TokenBook
from ..combats import Hub, RequestError
from ..combats.registry import MAX_COMBAT_PAGE, unknown_combat
from ..combats.telling import Batch
from ..methods import MAX_HISTORY_PAGE, METHODS, command, number, text
from ..tables import Scope
from . import admin
from .channel import OUTBOX_MESSAGES, SEND_TIMEOUT, WRITE_STALL, Channel
from .listeners import Admission, ConnectionLimits

log = structlog.get_logger("turnkeeper.session")

HELLO_TIMEOUT = 10.0
"""Seconds a connection may stay without a successful ``hello``: idle sockets cost nothing to
open and must not pile up."""
TOKEN_CHECK_SECONDS = 0.25
"""How often the daemon looks for a changed token file: a revoked token's sessions end within
this, even ones that only listen and never send a request."""
CLOSE_WAIT = WRITE_STALL + 1.0
"""Seconds a closing connection's slot is held for its last bytes to go out: its channel drops
them after ``WRITE_STALL`` without progress, so this is only a backstop."""

_ids = count(1)
_response = maker(wire.Response)
"""Makes a ``wire.Response`` by position, as ``wire.Response(...)`` does, without its frozen
``__init__``'s call per field: every request is answered with one."""


class Sessions:
    """Every connection of the daemon, what they may take (``Admission``) and the commands
    they have in flight."""

    def __init__(
        self,
        hub: Hub,
        tokens: TokenBook,
        *,
        narrator_uid: int | None,
        limits: ConnectionLimits,
        task_group: TaskGroup,
    ) -> None:
        self.hub = hub
        self.tokens = tokens
        self.narrator_uid = narrator_uid
        """Unix peers with this uid are narrators without a token; None turns that off."""
        self.admission = Admission(limits)
        self.connections: set[Session] = set()
        self.running: set[Session] = set()
        """Every session's task still running, admitted or not (``stop`` ends them)."""
        self.in_flight = 0
        self.draining = False
        self.stopped = False
        self.log_requests = log.is_enabled_for(logging.DEBUG)
        """Whether each request gets its log line (``--debug``): asked once, not per request."""
        self._task_group = task_group

    def accept(self, channel: Channel) -> None:
        """A channel's transport is up: serve it in a task of its own."""
        try:
            self._task_group.start_soon(Session(self, channel).run)
        except RuntimeError:
            channel.abort()  # the daemon is stopping: its task group takes no more

    def begin_command(self, session: Session) -> None:
        """A command of ``session``'s is accepted: from here it runs to its commit even if the
        daemon is asked to stop, and its session is stopped once it is over (``end_command``,
        ``Session.stop``), never in the middle. Refused while the daemon stops."""
        # Stopped sessions are refused too: a session stopped outside a command (a stop
        # without the drain, when the daemon fails) has its task cancelled already, and a
        # command it read before that would be cut at its first wait, left unanswered.
        if self.draining or self.stopped:
            raise RequestError(
                "shutting_down", "the daemon is stopping; retry with the same request_id"
            )
        self.in_flight += 1
        session.in_command = True

    def end_command(self, session: Session) -> None:
        """``session``'s command is over, committed or not."""
        self.in_flight -= 1
        session.in_command = False
        if session.stopping:
            session.stop()

    async def run(self) -> None:
        """Until cancelled (the daemon stops, or fails): then ``stop``. Sessions run shielded
        from the task group they run in, so that a command in flight is never cut, and this
        is what ends them: one scope per session, not a shielded one entered and left by
        every command (anyio's bookkeeping for it was most of its cost on a command's way)."""
        try:
            await anyio.sleep_forever()
        finally:
            self.stop()

    def stop(self) -> None:
        """End every session: at once, or the one running a command once it is answered; one
        that starts from now on ends as it starts."""
        self.stopped = True
        for session in list(self.running):
            session.stop()

    async def watch_tokens(self) -> None:
        """End the sessions of revoked tokens as soon as the token file changes, including those
        that only listen: checking at each request alone would leave a subscriber reading on."""
        seen: object = None
        while True:
            # At once when the book says it has a new copy (a revocation another daemon
            # notified), else at the tick, which finds a changed file.
            with anyio.move_on_after(TOKEN_CHECK_SECONDS):
                await self.tokens.changed()
            if self.tokens.stale():
                for session in list(self.connections):
                    if session.principal is not None and session.principal.key.startswith("token:"):
                        session.close_with(_tokens_unavailable())
                continue
            try:
                records = self.tokens.load()
            except (AuthError, OSError, ValueError, TypeError):
                continue  # what is wrong with the file is said where it is read for a request
            if records is seen:
                continue
            seen = records
            for session in list(self.connections):
                if session.principal is None:
                    continue
                if not self.tokens.still_valid(session.principal):
                    session.close_with(
                        wire.WireError(
                            "token_revoked", "the token of this session has been revoked"
                        )
                    )
                else:
                    session.rescope(self.tokens.scope(session.principal))


def _tokens_unavailable() -> wire.WireError:
    return wire.WireError(
        "tokens_unavailable", "the tokens cannot be read now: say hello again later"
    )


def _tables_changed() -> wire.WireError:
    return wire.WireError("tables_changed", "this session's tables have changed: say hello again")


Result = Plain | wire.Packed
"""What a method answers: plain data, or a value encoded already (a combat's view)."""
Handler = Callable[["Session", Mapping[str, Any]], Awaitable[Result]]
AtOnce = Callable[["Session", Mapping[str, Any]], Result | None]
"""A method's answer when it needs no waiting, or None when it does (``AT_ONCE``)."""


class Session:
    """One client: its identity, its language and its subscriptions (``Subscriber`` to the
    hub), over a channel whose transport it never asks about."""

    def __init__(self, sessions: Sessions, channel: Channel) -> None:
        self.sessions = sessions
        self.hub = sessions.hub
        self.channel = channel
        self.id = f"c{next(_ids)}"
        self.principal: Principal | None = None
        self.actor = Actor("observer")
        self.acting: Actor | None = None
        """Who this session's commands are by when they name no other user (``as``): the
        principal's actor, made once (it never changes after hello) rather than per command."""
        self.closing: str | None = None
        self.hello_scope: anyio.CancelScope | None = None
        self.locale = "en"
        self.narration: str | None = None
        """The locale events are told in for this session (hello's ``narrate``), or None."""
        self.task_scope = anyio.CancelScope(shield=True)
        """The session's task: shielded from the task group's cancellation, ended by ``stop``."""
        self.in_command = False
        self.stopping = False
        """Set by ``stop`` while a command runs: the session ends once it is answered."""
        self.scope: Scope = frozenset()
        """The tables this session may see and touch (None: every one), settled at hello:
        nothing before it."""
        self.ending: wire.WireError | None = None
        """Why the session ends once the request being answered has its answer (a hosting
        bridge lost a table: ``_follow_tables``)."""

    # Subscriber protocol -------------------------------------------------------------------

    def deliver(self, batch: Batch) -> bool:
        if self.closing is not None:
            return False
        if self.channel.post(batch):
            return True
        self.close_with(
            wire.WireError("slow_consumer", "the connection fell too far behind its events")
        )
        return False

    def room(self) -> int:
        return self.channel.room()

    def lost(self) -> None:
        self.close_with(
            wire.WireError(
                "subscription_lost", "the daemon failed to send this connection's events"
            )
        )

    def close_with(self, error: wire.WireError) -> None:
        """End the connection after a final error notification, written behind what is
        already buffered for the peer (its channel drops it all if the peer stops reading)."""
        if self.closing is None:
            self.closing = error.code
            error.fatal = True
            self.channel.close(wire.pack(self._refusal(error)))

    def _packed(self, message: wire.Message) -> bytes:
        """A reply's bytes: one too large for the wire becomes an error reply."""
        try:
            return wire.pack(message)
        except wire.WireError as e:
            assert isinstance(message, wire.Response)
            too_large = self.body(RequestError.relay(e, "result_too_large"))
            return wire.pack(wire.Response(message.msgid, too_large, None))

    async def reply(self, message: wire.Message) -> None:
        """Send a reply. One too large for the wire becomes an error reply; a peer that stops
        reading for SEND_TIMEOUT is disconnected."""
        data = self._packed(message)
        if not self.channel.room():
            try:
                await self.channel.wait_room()
            except TimeoutError:
                self.close_with(
                    wire.WireError(
                        "slow_consumer",
                        "a reply waited over {seconds:g} s to be read",
                        seconds=SEND_TIMEOUT,
                    )
                )
        if self.closing is None:
            self.channel.send(data)

    def body(self, error: ProtocolError) -> wire.ErrorBody:
        """A refusal as the wire carries it, its message in this session's language."""
        return wire.ErrorBody(error.code, i18n.localize(error, self.locale), error.field)

    def _refusal(self, error: wire.WireError) -> wire.Message:
        """What to send for a refused message, in this session's language."""
        return wire.error_message(error, self.body(error).message)

    # The connection's life -----------------------------------------------------------------

    def stop(self) -> None:
        """End this session's task (``Sessions.stop``): at once, or after its command."""
        if self.in_command:
            self.stopping = True
        else:
            self.task_scope.cancel()

    async def run(self) -> None:
        # One coroutine for the connection's whole life, its requests read and answered in its
        # own loop: every wait of a command (for its request, for its commit) suspends and
        # resumes each coroutine its task is made of, so each level spared counts per command.
        sessions = self.sessions
        channel = self.channel
        with self.task_scope:
            sessions.running.add(self)
            try:
                if sessions.stopped:
                    self.task_scope.cancel()
                if not await channel.open():
                    return  # a plain HTTP request, answered
                admission = sessions.admission
                busy = admission.admit(channel)
                if busy is not None:
                    self.close_with(busy)
                    await self._closed()
                    return
                sessions.connections.add(self)
                # Every log line of this connection's task carries its id.
                structlog.contextvars.bind_contextvars(connection=self.id)
                log.info("connected", transport=channel.kind, uid=channel.peer_uid)
                try:
                    if await self._greeted():
                        while self.closing is None:
                            item = await channel.next(wire.REQUESTS)
                            if type(item) is not wire.Request:
                                if not await self._handle(item):
                                    break
                                continue
                            # ``_handle``'s request, spelled out, and ``reply``'s when its
                            # answer has room: every request after hello comes this way.
                            response = await self.answer(item)
                            if self.closing is None and channel.room():
                                channel.send(self._packed(response))
                            else:
                                await self.reply(response)
                            if self.ending is not None:
                                self.close_with(self.ending)
                except Exception:
                    # A broken connection ends alone: the listener, the other clients and the
                    # daemon go on.
                    log.exception("connection_failed")
                finally:
                    self.hub.forget(self)
                    sessions.connections.discard(self)
                    channel.close()
                    # The slot is free once the connection's last bytes are out, not before:
                    # until then they are still the daemon's to hold.
                    await self._closed()
                    admission.leave(channel, session=self.principal is not None)
                    log.info("disconnected", reason=self.closing or channel.gone or "closed")
            finally:
                sessions.running.discard(self)

    async def _closed(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT) as waited:
            await self.channel.wait_closed()
        if waited.cancelled_caught:
            self.channel.abort()

    async def _greeted(self) -> bool:
        """Messages until a successful hello, within ``HELLO_TIMEOUT``; False if the connection
        ended first."""
        with anyio.move_on_after(HELLO_TIMEOUT) as hello_scope:
            self.hello_scope = hello_scope
            while self.principal is None and self.closing is None:
                # What one message may cost is far less before hello, when anyone who can
                # reach the port may be sending; a hello's success raises it for the very
                # next one (``run``).
                if not await self._handle(await self.channel.next(wire.BEFORE_HELLO)):
                    return False
        if hello_scope.cancelled_caught and self.principal is None:
            self.close_with(
                wire.WireError(
                    "hello_timeout", "no hello within {seconds:g} s", seconds=HELLO_TIMEOUT
                )
            )
            return False
        return self.closing is None

    async def _handle(self, item: wire.Message | wire.WireError | None) -> bool:
        """Handle one message read (None: the peer or the daemon closed the connection); False
        once the connection is over."""
        if item is None:
            return False
        # A request first, by its class (``channel.next`` makes them): the usual item, told
        # without an ``isinstance`` that fails, which looks up its ``__class__`` besides.
        if type(item) is wire.Request:
            await self.reply(await self.answer(item))
            if self.ending is not None:
                self.close_with(self.ending)
        elif isinstance(item, wire.WireError):
            if item.fatal:
                self.close_with(item)
                return False
            # Notifications from clients carry nothing in this version and are ignored,
            # malformed ones too (some MessagePack-RPC clients send one on connect).
            if not item.notification:
                await self.reply(self._refusal(item))
        elif isinstance(item, wire.Response):
            # Clients answer nothing in this protocol: a response is a confused peer.
            note = wire.WireError(wire.INVALID_MESSAGE, "clients send no responses")
            await self.reply(self._refusal(note))
        return self.closing is None

    # Requests ------------------------------------------------------------------------------

    async def answer(self, request: wire.Request) -> wire.Response:
        """The response to ``request``: never a traceback to the client (``_failed``)."""
        logged = self.sessions.log_requests
        started = time.perf_counter() if logged else 0.0
        try:
            handler = HANDLERS.get(request.method)
            if handler is None:
                raise RequestError(
                    "unknown_method", "no method {method!r}", "method", method=request.method
                )
            self._may_call(request.method)
            result = await handler(self, request.params)
        except Exception as e:
            response = self._failed(request, e)
        else:
            response = _response(request.msgid, None, result)
        # Logged only with ``--debug``: otherwise not even a call per request.
        return self._logged(request, response, started) if logged else response

    def _at_once(self, item: wire.Message | wire.WireError) -> bool:
        """Answer ``item`` straight from its channel, as the session's task would, when that
        needs no waiting: a request of ``AT_ONCE`` that finds what it reads in memory, with
        room for the answer. False leaves it to the task: anything else, and what must wait
        (a combat not rebuilt yet, a peer that stopped reading)."""
        if type(item) is not wire.Request or self.closing is not None:
            return False
        handler = AT_ONCE.get(item.method)
        if handler is None or not self.channel.room():
            return False
        logged = self.sessions.log_requests
        started = time.perf_counter() if logged else 0.0
        try:
            try:
                self._may_call(item.method)
                result = handler(self, item.params)
            except Exception as e:
                response = self._failed(item, e)
            else:
                if result is None:
                    return False
                response = wire.Response(item.msgid, None, result)
            if logged:
                self._logged(item, response, started)
            data = self._packed(response)
        except Exception:
            # Not answerable here after all (say its error cannot be told): the task reads it
            # again (a read changes nothing) and fails as it fails everything, logged, the
            # connection closed in order, not aborted from inside the transport's callback.
            return False
        if self.closing is None:
            self.channel.send(data)
            if self.ending is not None:
                self.close_with(self.ending)
        return True

    def _failed(self, request: wire.Request, error: Exception) -> wire.Response:
        """The one place where a request's failure becomes a wire error, in this session's
        language. Called while ``error`` is handled, so that its traceback is logged."""
        if isinstance(error, ProtocolError):
            return wire.Response(request.msgid, self.body(error), None)
        # One request's failure is that request's error, never the daemon's end.
        log.exception("request_failed", method=request.method)
        failed = RequestError("internal_error", "the daemon failed on this request")
        return wire.Response(request.msgid, self.body(failed), None)

    def _logged(
        self, request: wire.Request, response: wire.Response, started: float
    ) -> wire.Response:
        # One line per request is for debugging (``--debug``): at INFO it would be most of a
        # busy daemon's log, and even its arguments cost a read a noticeable share.
        if self.sessions.log_requests:
            combat = request.params.get("combat") or request.params.get("combat_id")
            log.debug(
                "request",
                user=self.principal.key if self.principal else None,
                method=request.method,
                combat=combat if isinstance(combat, str) else None,
                outcome=response.error.code if response.error is not None else "ok",
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
            )
        return response

    def _may_call(self, method: str) -> None:
        """Refuse a method of ``METHODS`` this session may not call now."""
        if METHODS[method].kind != "session":
            principal = self.principal
            if principal is None:
                raise RequestError("hello_required", "say hello first", "method")
            # Only a token can be revoked or go unreadable: the narrator's uid is asked nothing.
            if principal.key.startswith("token:"):
                if self.sessions.tokens.stale():
                    self.close_with(_tokens_unavailable())
                    raise RequestError(
                        "tokens_unavailable",
                        "the tokens cannot be read now: say hello again later",
                    )
                if not self.sessions.tokens.still_valid(principal):
                    self.close_with(
                        wire.WireError(
                            "token_revoked", "the token of this session has been revoked"
                        )
                    )
                    raise RequestError(
                        "token_revoked", "the token of this session has been revoked"
                    )
            if principal.host:
                self._follow_tables(principal)

    def _follow_tables(self, principal: Principal) -> None:
        """A hosting bridge's tables as the token file says now, for this request already: a
        table taken from it is out of reach at once, not at ``watch_tokens``' next tick. The
        session then ends right after this request's answer, as ``rescope`` ends it."""
        scope = self.sessions.tokens.scope(principal)
        if scope is not None and self.scope is not None and not self.scope <= scope:
            self.scope = scope
            self.ending = _tables_changed()
        else:
            self.rescope(scope)

    def promote(self, principal: Principal, narrate: bool) -> None:
        """Make this connection a session of ``principal``, or refuse: a ``server_busy``
        notification closes it, and the refused hello gets no answer of its own."""
        busy = self.sessions.admission.session_refusal(self.channel.kind)
        if busy is not None:
            self.close_with(busy)
            raise busy
        self.sessions.admission.promote(self.channel)
        self.principal = principal
        self.scope = self.sessions.tokens.scope(principal)
        self.narration = self.locale if narrate else None
        # The hello deadline is met: requests that came with the hello must not be cut by it.
        if self.hello_scope is not None:
            self.hello_scope.deadline = math.inf
        self.actor = principal.reader()
        # Run in this task's context, so that what it logs names this connection too; bound
        # with no function of ours around it, which would be one more call per read.
        run: Callable[..., bool] = contextvars.copy_context().run
        self.channel.at_once = partial(run, self._at_once)

    def rescope(self, scope: Scope) -> None:
        """The token file changed: a session that lost a table ends (its subscriptions may
        follow it), one that gained a table sees it from now on."""
        if self.scope is None or scope == self.scope:
            return
        if scope is None or not self.scope <= scope:
            self.close_with(_tables_changed())
            return
        self.scope = scope
        self.hub.widen(self, self.scope)

    def told(self, result: Plain, actor: Actor) -> Plain:
        """A command result's events, as shown to ``actor``, with their narrated lines if this
        session asked for them."""
        if self.narration is None:
            return result
        assert isinstance(result, dict)
        combat = result["combat"]
        assert isinstance(combat, str)
        events = self.hub.told(combat, result["events"], actor, self.narration)
        return {**result, "events": events}


# The method table --------------------------------------------------------------------------------


async def _hello(session: Session, params: Mapping[str, Any]) -> Plain:
    if session.principal is not None:
        raise RequestError("hello_repeated", "this connection has said hello already", "method")
    locale = params.get("locale")
    if locale is not None and not isinstance(locale, str):
        raise RequestError("invalid_params", "a string", "locale")
    narrate = params.get("narrate", False)
    if not isinstance(narrate, bool):
        raise RequestError("invalid_params", "a boolean", "narrate")
    # Chosen before anything can fail, so even a refused hello answers in the language asked.
    session.locale = i18n.negotiate(locale)
    level = params.get("protocol")
    if not isinstance(level, int) or level < wire.COMPATIBLE_VERSION:
        raise RequestError(
            "unsupported_protocol",
            "this server speaks protocol {level} (compatible down to {compatible})",
            "protocol",
            level=wire.PROTOCOL_VERSION,
            compatible=wire.COMPATIBLE_VERSION,
        )
    principal = await _principal(session, params.get("token"))
    session.promote(principal, narrate)
    return {
        "protocol": wire.PROTOCOL_VERSION,
        "compatible": wire.COMPATIBLE_VERSION,
        "server": {"name": "turnkeeper", "version": __version__},
        "session": {
            "role": principal.role,
            "user": principal.user,
            "table": principal.table,
            "host": principal.host,
            "connection": session.id,
            "locale": session.locale,
        },
        "methods": _METHOD_LIST,
        "events": [{"name": name, "since": 1} for name in sorted(EVENTS)],
        "limits": {
            "max_message_bytes": wire.MAX_MESSAGE_BYTES,
            "max_request_values": wire.MAX_REQUEST_VALUES,
            "outbox_messages": OUTBOX_MESSAGES,
            "max_history_page": MAX_HISTORY_PAGE,
            "max_combat_page": MAX_COMBAT_PAGE,
        },
    }


_METHOD_LIST: list[Plain] = [
    {"name": m.name, "kind": m.kind, "since": m.since, "summary": m.summary}
    for m in METHODS.values()
]


async def _principal(session: Session, token: object) -> Principal:
    """Who says hello: a token's holder, or the narrator's own uid on the Unix socket."""
    if token is not None:
        if not isinstance(token, str):
            raise RequestError("invalid_params", "a string", "token")
        if session.sessions.tokens.stale():
            raise RequestError(
                "tokens_unavailable", "the tokens cannot be read now: retry later", "token"
            )
        principal = await session.sessions.tokens.lookup(token)
        if principal is None:
            raise RequestError("unauthenticated", "unknown or revoked token", "token")
        return principal
    uid = session.channel.peer_uid
    if uid is not None and uid == session.sessions.narrator_uid:
        return Principal(f"uid:{uid}", "narrator", table=None)
    raise RequestError("unauthenticated", "a token is required on this connection", "token")


async def _command(method: str, session: Session, params: Mapping[str, Any]) -> Plain:
    principal = session.principal
    assert principal is not None
    request_id = text(params, "request_id")
    assert request_id is not None
    # Checked only when given: most commands act as their session's own user.
    as_user = None if params.get("as") is None else text(params, "as", required=False)
    actor = session.acting if as_user is None else None
    if actor is None:
        actor = principal.actor(as_user)
        if as_user is None:
            session.acting = actor
    combat_id, value = command(method, params)
    if type(value) is cmd.CreateCombat:
        await admin.look_for_table(session, combat_id)
    if admin.hidden(session, combat_id, value):
        await admin.refuse_hidden(session, combat_id, request_id)
    # Bracketed here rather than by a coroutine of ``Sessions``: every command spares a level
    # of coroutines, which its every suspension and resumption would pass through.
    sessions = session.sessions
    sessions.begin_command(session)
    try:
        result = await session.hub.execute(
            principal.key, actor, combat_id, value, request_id, session.scope
        )
    finally:
        sessions.end_command(session)
    return session.told(result, actor)


def _command_handler(method: str) -> Handler:
    # A partial, not a closure: every command spares a coroutine that only awaits another;
    # bound by position, for a keyword would cost a dict per call.
    return partial(_command, method)


def _page_limit(params: Mapping[str, Any]) -> int | None:
    """A page's ``limit``: None (every combat, if they fit one page) when not given."""
    if params.get("limit") is None:
        return None
    return number(params, "limit", MAX_COMBAT_PAGE, 1, MAX_COMBAT_PAGE)


def _combat(params: Mapping[str, Any]) -> str:
    combat_id = text(params, "combat")
    assert combat_id is not None
    return combat_id


def _seen(session: Session, combat_id: str) -> str:
    """``combat_id``, refused as unknown when it is of another table: called where the hub
    would refuse an unknown combat, after the checks of the params that come first."""
    if not session.hub.visible(combat_id, session.scope):
        raise unknown_combat(combat_id)
    return combat_id


async def _list_combats(session: Session, params: Mapping[str, Any]) -> Plain:
    after = text(params, "after", required=False)
    return await session.hub.summaries(after, _page_limit(params), session.scope)


async def _list_plugins(session: Session, params: Mapping[str, Any]) -> Plain:
    return session.hub.plugin_listing(counters=session.scope is None)


async def _get_combat(session: Session, params: Mapping[str, Any]) -> Result:
    combat_id = _seen(session, _combat(params))
    return await session.hub.view(combat_id, session.actor, session.scope)


def _get_combat_now(session: Session, params: Mapping[str, Any]) -> Result | None:
    return session.hub.queries.view_now(_seen(session, _combat(params)), session.actor)


async def _history(session: Session, params: Mapping[str, Any]) -> Plain:
    combat_id = _combat(params)
    after = number(params, "after", 0, 0, 2**53)
    limit = number(params, "limit", 100, 1, MAX_HISTORY_PAGE)
    return await session.hub.history(
        _seen(session, combat_id), session.actor, after, limit, session.narration, session.scope
    )


async def _subscribe(session: Session, params: Mapping[str, Any]) -> Plain:
    combat_id = _combat(params)
    after = number(params, "after", 0, 0, 2**53)
    _seen(session, combat_id)
    seq = await session.hub.subscribe(combat_id, session, after, session.scope)
    return {"combat": combat_id, "seq": seq}


async def _unsubscribe(session: Session, params: Mapping[str, Any]) -> Plain:
    combat_id = _combat(params)
    session.hub.unsubscribe(session, combat_id)
    return {"combat": combat_id}


async def _subscribe_all(session: Session, params: Mapping[str, Any]) -> Plain:
    return await session.hub.subscribe_all(session, _page_limit(params), session.scope)


async def _unsubscribe_all(session: Session, params: Mapping[str, Any]) -> Plain:
    session.hub.unsubscribe_all(session)
    return {}


HANDLERS: Mapping[str, Handler] = {
    "hello": _hello,
    "list_combats": _list_combats,
    "list_plugins": _list_plugins,
    "get_combat": _get_combat,
    "history": _history,
    "subscribe": _subscribe,
    "unsubscribe": _unsubscribe,
    "subscribe_all": _subscribe_all,
    "unsubscribe_all": _unsubscribe_all,
    **admin.HANDLERS,
    **{m.name: _command_handler(m.name) for m in METHODS.values() if m.kind == "command"},
}
"""What each method of ``turnkeeper.methods.METHODS`` does, by its name."""

AT_ONCE: Mapping[str, AtOnce] = {"get_combat": _get_combat_now}
"""Reads answered from memory as soon as they arrive (``Session._at_once``), by method name:
the most frequent request, a combat's view, costs no task switch."""
