"""The wire codec: MessagePack-RPC messages to bytes and back, for the daemon and its clients.

This is the bottom layer only (pynvim's strict layering): bytes become typed messages here; matching
responses to requests and calling methods happen above, and nothing here does I/O.

A connection carries a plain concatenated msgpack stream (no length prefix) of three arrays:

- request ``[0, msgid, method, params]``
- response ``[1, msgid, error, result]``
- notification ``[2, method, params]``

``msgid`` is an integer in ``0..MAX_MSGID``; ``method`` a string. Turnkeeper passes named
parameters as one map inside the params array (``[0, 7, "end_turn", [{"combat": "c1"}]]``); an
empty params array means no parameters. ``error`` is nil or ``{"code", "message", "field"}``.
Every value is plain data: nil, booleans, integers, floats, strings, arrays and maps keyed by
strings. The request ``Request(7, "end_turn", {"combat": "c1"})`` is these bytes::

    94 00 07 a8 65 6e 64 5f 74 75 72 6e 91 81 a6 63 6f 6d 62 61 74 a2 63 31

:class:`Decoder` reports a bad message as a :class:`WireError` in its output, in stream order,
with one of four stable codes:

- ``invalid_message``: well-formed msgpack that is not a Turnkeeper message (wrong shape or types,
  a bin or ext value, a map key that is not a string). Not fatal.
- ``nested_too_deeply``: arrays and maps nested past ``MAX_NESTING``. Not fatal, unless so deep
  that msgpack itself gave up.
- ``message_too_large``: a message over the decoder's byte limit, a string, array or map whose
  header announces more than its limit, or a message that decodes to more values than the
  decoder's limit. Fatal, and detected as soon as the offending byte or header arrives.
- ``malformed_msgpack``: bytes that are not msgpack, invalid UTF-8, a map key msgpack refuses (an
  integer, say). Fatal.

After a non-fatal error exactly the bad message was consumed and decoding goes on;
:func:`error_message` gives what to send back: an error response when the message was a request
whose msgid could be read, else an ``ERROR_NOTIFICATION`` (a daemon sends nothing for a bad
notification, ``WireError.notification``: clients' notifications are ignored). A fatal error
means the byte stream can no longer be trusted: the server sends the final notification
``[2, "error", [{"code", "message", "field", "fatal": true}]]`` and closes the connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# msgpack ships no type information; the codec's own signatures are what callers see.
import msgpack  # type: ignore[import-untyped]

from turnkeeper_engine.errors import Arg, TemplatedError

PROTOCOL_VERSION = 1
"""The protocol level this codebase speaks; a client reads the daemon's in the hello call."""

COMPATIBLE_VERSION = 1
"""The oldest protocol level a peer may speak and still be served by this one."""

MAX_MSGID = 2**32 - 1
"""MessagePack-RPC message ids are unsigned 32-bit integers; a sender wraps around after this."""

MAX_MESSAGE_BYTES = 1024 * 1024
"""Largest encoded message. The largest legitimate one (a combat snapshot or a page of history) is
far smaller; the bound caps what one connection can make us buffer."""

MAX_UNAUTHENTICATED_MESSAGE_BYTES = 8 * 1024
"""Largest message on a connection that has not said hello yet. A hello is a few hundred bytes,
and anyone who can reach a port can open a connection: what such a peer can make the daemon
buffer and decode must stay small, whatever it sends."""

MAX_REQUEST_VALUES = 16 * 1024
"""Most values (arrays, maps and the items in them) one request may decode to. Decoding multiplies
size: an empty map is one byte on the wire and about 64 in memory, so a 1 MiB message of them would
cost some 70 MiB and hold the loop for a fifth of a second. The largest legitimate request (a
``reorder_group`` naming 500 combatants) is a few hundred values."""

MAX_UNAUTHENTICATED_VALUES = 256
"""Most values one message may decode to before hello: a hello is a few dozen."""

MAX_STRING_BYTES = 64 * 1024
"""Longest str (or bin) value: names, notes and descriptions are short human text, so a longer
value is a bug or abuse, refused before anything downstream sees it."""

MAX_ARRAY_ITEMS = 64 * 1024
"""Most items in one array. msgpack allocates a list of the declared length before the items
arrive, so this caps what a five-byte header can make us allocate; event pages are far shorter."""

MAX_MAP_ITEMS = 4 * 1024
"""Most entries in one map. msgpack presizes a dict from the map header; Turnkeeper's maps are
records of a few dozen fields or tables keyed by combatant, far below this."""

MAX_NESTING = 32
"""Deepest nesting of arrays and maps inside params, a result or an error, counted from the params
map (the result, the error map) as level 1: the message array and the params array around it do
not count. Turnkeeper's values nest a handful of levels (the engine's plain codec also stops at
32); deeper input is hostile and would only cost recursion further up."""

ERROR_NOTIFICATION = "error"
"""Method of the notification that reports an error no response can carry: one in a message
without a readable request msgid, or a fatal one sent just before the server closes."""

# The wire's own error codes (see above); they never change once released.
INVALID_MESSAGE = "invalid_message"
NESTED_TOO_DEEPLY = "nested_too_deeply"
MALFORMED_MSGPACK = "malformed_msgpack"
MESSAGE_TOO_LARGE = "message_too_large"

_REQUEST = 0
_RESPONSE = 1
_NOTIFICATION = 2

_PLAIN_SCALARS = (type(None), bool, int, float, str)
_LONGEST_HEADER = 5
"""Bytes of the longest str, bin or ext header: a type byte and four of length (msgpack reads an
ext's own type byte with its body)."""
_LONGEST_FIXED = 8
"""Bytes of the longest value or header part msgpack waits for other than a str, bin or ext body
(a 64-bit number): when more than this is buffered, msgpack is inside such a body."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one message a :class:`Decoder` reads may cost: ``message_bytes`` encoded, and
    ``values`` decoded (arrays, maps and their items; ``None`` leaves them uncounted).

    Array and map headers are held to what could fit the message, so one announcing more is
    refused the moment it arrives, before anything is allocated for it. msgpack checks a
    string's (bin's, ext's) length only once it is whole: the decoder reads the header itself
    once a few bytes of the string are there, and in any case holds no more of one string than
    ``max_value_bytes``.
    """

    message_bytes: int
    values: int | None = None

    @property
    def max_value_bytes(self) -> int:
        """The most bytes of one scalar (a string, with its header) the decoder buffers."""
        return min(MAX_STRING_BYTES + _LONGEST_HEADER, self.message_bytes)

    def unpacker_options(self) -> dict[str, int]:
        """The msgpack ``Unpacker`` bounds these limits imply."""
        items = self.message_bytes if self.values is None else min(self.message_bytes, self.values)
        return {
            "max_buffer_size": self.max_value_bytes,
            "max_str_len": min(MAX_STRING_BYTES, self.message_bytes),
            "max_bin_len": min(MAX_STRING_BYTES, self.message_bytes),
            "max_ext_len": min(MAX_STRING_BYTES, self.message_bytes),
            "max_array_len": min(MAX_ARRAY_ITEMS, items),
            # A map entry is a key and a value, each at least a byte and each a value.
            "max_map_len": min(MAX_MAP_ITEMS, items // 2),
        }


FROM_DAEMON = Limits(MAX_MESSAGE_BYTES)
"""What a client reads: any message the daemon may send (its values are not counted)."""

REQUESTS = Limits(MAX_MESSAGE_BYTES, MAX_REQUEST_VALUES)
"""What the daemon reads from a session that has said hello."""

BEFORE_HELLO = Limits(MAX_UNAUTHENTICATED_MESSAGE_BYTES, MAX_UNAUTHENTICATED_VALUES)
"""What the daemon reads from a connection that has not said hello (yet)."""


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """The error of a response: a stable machine code, a message for people, the offending field.

    ``code`` never changes once released; clients branch on it. ``field`` names the parameter at
    fault (``""`` when the request as a whole is refused).
    """

    code: str
    message: str
    field: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """A call that expects a :class:`Response` with the same ``msgid``."""

    msgid: int
    method: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to the request ``msgid``: ``error`` is ``None`` on success, else ``result`` is."""

    msgid: int
    error: ErrorBody | None
    result: Any


@dataclass(frozen=True, slots=True)
class Notification:
    """A one-way message: an event for a subscriber, or an error with no request to answer."""

    method: str
    params: dict[str, Any] = field(default_factory=dict)


Message = Request | Response | Notification


class WireError(TemplatedError):
    """A message or byte stream the codec refuses, as data: ``code``, ``message`` and ``field``.

    ``fatal`` is true when the byte stream can no longer be trusted and the connection must close.
    ``msgid`` is the id of the refused request when it could be read, so the request can be
    answered; it is ``None`` otherwise and always for fatal errors. ``notification`` is true when
    the refused message is a notification (type 2), which a daemon ignores rather than answer.
    The message is ``template``
    (a string literal) filled in with the named ``args``, so a server can translate it.
    """

    def __init__(
        self,
        code: str,
        template: str,
        field: str = "",
        *,
        fatal: bool = False,
        msgid: int | None = None,
        notification: bool = False,
        **args: Arg,
    ) -> None:
        super().__init__(template, args)
        self.code = code
        self.field = field
        self.fatal = fatal
        self.msgid = msgid
        self.notification = notification

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def pack(message: Message) -> bytes:
    """Encode one message. Raises ``WireError`` (``message_too_large``) if no peer would take it.

    The error carries the message's msgid, so a server can answer a request with it instead.
    """
    data: bytes = msgpack.packb(_to_array(message), use_bin_type=True)
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError(
            MESSAGE_TOO_LARGE,
            "the encoded message is {size} bytes, over the limit of {limit}",
            msgid=None if isinstance(message, Notification) else message.msgid,
            size=len(data),
            limit=MAX_MESSAGE_BYTES,
        )
    return data


def error_message(error: WireError, message: str | None = None) -> Response | Notification:
    """What to send for ``error``: a response to its request if known, else an error notification.

    The notification's params are ``{"code", "message", "field", "fatal"}``. ``message``, when
    given, replaces the error's own (a server sends it in the session's language).
    """
    text = error.message if message is None else message
    if error.msgid is not None:
        return Response(error.msgid, ErrorBody(error.code, text, error.field), None)
    params = {
        "code": error.code,
        "message": text,
        "field": error.field,
        "fatal": error.fatal,
    }
    return Notification(ERROR_NOTIFICATION, params)


class Decoder:
    """Turns the bytes of one connection, in whatever chunks they arrive, into messages.

    ``limits`` bound each message; :meth:`limit` changes them from the next message on (a
    daemon's connection gets roomier limits once it has said hello).
    """

    def __init__(self, limits: Limits = FROM_DAEMON) -> None:
        self._limits = limits
        self._unpacker = self._new_unpacker()
        self._backlog = memoryview(b"")
        # The chunks fed since the end of the last whole message: where its leftover bytes are
        # when the limits change.
        self._chunks: list[memoryview] = []
        self._fed = 0
        self._message_start = 0
        self._values = 0
        self._fatal: WireError | None = None

    def _new_unpacker(self) -> Any:
        # The limits are checked as msgpack reads each header, before anything is allocated.
        # Bytes are fed only as far as the current message may still grow and the buffer may
        # hold, so max_buffer_size is a backstop. Integer map keys and the like are refused by
        # msgpack itself (strict_map_key), so they are fatal; bin and ext values decode and are
        # refused per message in _check_plain.
        counted = self._limits.values is not None
        return msgpack.Unpacker(
            raw=False,
            strict_map_key=True,
            list_hook=self._count_array if counted else None,
            object_hook=self._count_map if counted else None,
            **self._limits.unpacker_options(),
        )

    def feed(self, data: bytes) -> list[Message | WireError]:
        """Decode ``data``: every message it completes, with a ``WireError`` for each bad one.

        Items keep stream order. A fatal error is the last item; feeding again raises it.
        """
        self.push(data)
        decoded: list[Message | WireError] = []
        while (item := self.next()) is not None:
            decoded.append(item)
        return decoded

    def push(self, data: bytes) -> None:
        """Queue ``data`` for :meth:`next`, which must have returned None since the last push.
        Raises the fatal error, if there was one."""
        if self._fatal is not None:
            raise self._fatal
        assert not self._backlog, "push() before next() used up the bytes pushed before"
        self._backlog = memoryview(data)

    def next(self) -> Message | WireError | None:
        """The next message, or the ``WireError`` for the next bad one; None when the bytes
        pushed so far hold no more (and after a fatal error)."""
        while self._fatal is None:
            try:
                obj = next(self._unpacker)
            except StopIteration:
                if self._waits_on_a_long_value():
                    return self._fail(self._value_too_long())
                if not self._backlog:
                    return None
                # Feed no more than the current message may still grow by, so a message over
                # the limit is refused at its first excess byte.
                room = self._limits.message_bytes - (self._fed - self._message_start)
                if room <= 0:
                    return self._fail(too_large(self._limits.message_bytes))
                # msgpack buffers only what it has not parsed yet: the scalar it waits on.
                buffered = self._fed - self._unpacker.tell()
                room = min(room, self._limits.max_value_bytes - buffered)
                if room <= 0:
                    return self._fail(self._value_too_long())
                chunk, self._backlog = self._backlog[:room], self._backlog[room:]
                self._unpacker.feed(chunk)
                self._chunks.append(chunk)
                self._fed += len(chunk)
                continue
            except _TooMany:
                return self._fail(
                    WireError(
                        MESSAGE_TOO_LARGE,
                        "a message decodes to more than {limit} values",
                        fatal=True,
                        limit=self._limits.values or 0,
                    )
                )
            except ValueError as exc:
                return self._fail(_stream_error(exc))
            # tell() is the end of the object just read; later it also counts a partial one.
            self._message_start = self._unpacker.tell()
            self._chunks = self._chunks[-1:]
            self._values = 0
            try:
                return _parse(obj)
            except WireError as err:
                return err
        return None

    def limit(self, limits: Limits) -> None:
        """Hold the messages after the last one returned to ``limits``."""
        if limits == self._limits:
            return
        held = self._fed - self._message_start
        leftover = b"".join(self._chunks)[-held:] if held else b""
        self._backlog = memoryview(leftover + bytes(self._backlog))
        self._limits = limits
        self._unpacker = self._new_unpacker()
        self._chunks = []
        self._fed = self._message_start = self._values = 0

    @property
    def pending(self) -> bool:
        """Whether bytes of an incomplete message are held, waiting for the rest."""
        return self._fed != self._message_start or bool(self._backlog)

    def _value_too_long(self) -> WireError:
        return WireError(
            MESSAGE_TOO_LARGE,
            "a value is longer than {limit} bytes",
            fatal=True,
            limit=self._limits.unpacker_options()["max_str_len"],
        )

    def _waits_on_a_long_value(self) -> bool:
        """Whether msgpack waits on the body of a str, bin or ext whose header announced more
        than the limit.

        Past _LONGEST_FIXED bytes buffered, msgpack is inside such a body and its header ends
        where the buffer starts (``tell()``). Which of the bytes before are the header is not
        known, so every reading that fits is tried: the value is refused only when each one
        announces too much, so a value within the limit is never refused for a wrong reading.
        """
        start = self._unpacker.tell()
        buffered = self._fed - start
        if buffered <= _LONGEST_FIXED:
            return False
        before = self._bytes_before(start, _LONGEST_HEADER)
        lengths = [
            length
            for size in range(1, len(before) + 1)
            if (length := _announced(before[-size:])) is not None and length > buffered
        ]
        return bool(lengths) and min(lengths) > self._limits.unpacker_options()["max_str_len"]

    def _bytes_before(self, position: int, count: int) -> bytes:
        """Up to ``count`` bytes of the stream just before ``position``, from the chunks kept."""
        end = self._fed
        parts: list[bytes] = []
        for chunk in reversed(self._chunks):
            begin = end - len(chunk)
            if begin < position:
                parts.append(bytes(chunk[max(0, position - count - begin) : position - begin]))
                if position - count >= begin:
                    break
            end = begin
        return b"".join(reversed(parts))

    def _count_array(self, items: list[Any]) -> list[Any]:
        self._tally(1 + len(items))
        return items

    def _count_map(self, entries: dict[str, Any]) -> dict[str, Any]:
        self._tally(1 + 2 * len(entries))
        return entries

    def _tally(self, values: int) -> None:
        # msgpack calls the hooks as each array and map is completed, so a message is stopped
        # once it has cost its limit, not after it has been decoded whole.
        self._values += values
        assert self._limits.values is not None
        if self._values > self._limits.values:
            raise _TooMany

    def _fail(self, error: WireError) -> WireError:
        self._fatal = error
        self._backlog = memoryview(b"")
        self._chunks = []
        return error


def _announced(header: bytes) -> int | None:
    """The body length ``header`` announces if it is exactly a str, bin or ext header, else None.
    An ext's body is its type byte and its data."""
    kind, rest = header[0], header[1:]
    if 0xA0 <= kind <= 0xBF and not rest:
        return kind & 0x1F
    if 0xD4 <= kind <= 0xD8 and not rest:  # fixext: 1 to 16 bytes
        return 1 + (1 << (kind - 0xD4))
    # str, bin and ext of 8, 16 and 32 bits of length.
    sizes = {0xD9: 1, 0xC4: 1, 0xC7: 1, 0xDA: 2, 0xC5: 2, 0xC8: 2, 0xDB: 4, 0xC6: 4, 0xC9: 4}
    if sizes.get(kind) != len(rest):
        return None
    return int.from_bytes(rest, "big") + (1 if kind in (0xC7, 0xC8, 0xC9) else 0)


class _TooMany(Exception):  # noqa: N818 - internal signal, always turned into a WireError
    """Raised from msgpack's hooks when a message decodes to more values than its limit."""


def too_large(limit: int = MAX_MESSAGE_BYTES) -> WireError:
    """The fatal error for a message over ``limit`` bytes, however it is framed."""
    return WireError(
        MESSAGE_TOO_LARGE,
        "a message is longer than {limit} bytes",
        fatal=True,
        limit=limit,
    )


def _stream_error(exc: ValueError) -> WireError:
    """The fatal error for what msgpack raised: after any of these it cannot resume the stream."""
    if isinstance(exc, msgpack.StackError):
        return WireError(NESTED_TOO_DEEPLY, "the msgpack data nests too deeply", fatal=True)
    # msgpack words its length-limit errors "N exceeds max_<kind>_len(M)" and has no type for them.
    if "exceeds max_" in str(exc):
        return WireError(
            MESSAGE_TOO_LARGE, "a value is too long ({detail})", fatal=True, detail=str(exc)
        )
    if not str(exc):
        return WireError(MALFORMED_MSGPACK, "the bytes are not valid msgpack", fatal=True)
    return WireError(
        MALFORMED_MSGPACK, "the bytes are not valid msgpack ({detail})", fatal=True, detail=str(exc)
    )


def _to_array(message: Message) -> list[Any]:
    if isinstance(message, Request):
        return [_REQUEST, message.msgid, message.method, _params_array(message.params)]
    if isinstance(message, Response):
        error = message.error
        body = (
            None
            if error is None
            else {"code": error.code, "message": error.message, "field": error.field}
        )
        return [_RESPONSE, message.msgid, body, message.result]
    return [_NOTIFICATION, message.method, _params_array(message.params)]


def _params_array(params: dict[str, Any]) -> list[dict[str, Any]]:
    return [params] if params else []


def _parse(obj: Any) -> Message:
    """The message ``obj`` is, or a non-fatal ``WireError`` naming what is wrong with it."""
    if not isinstance(obj, list):
        raise WireError(INVALID_MESSAGE, "a message must be an array")
    # type() rather than isinstance(): msgpack's true decodes to a bool, and True == 1.
    kind = obj[0] if obj and type(obj[0]) is int else None
    if kind == _REQUEST:
        # Read the msgid first: once it is known, every other fault can be answered.
        msgid = _msgid(obj)
        _expect_length(obj, 4, msgid)
        return Request(msgid, _method(obj[2], msgid), _params(obj[3], msgid))
    if kind == _RESPONSE:
        # Never answer a response, so its faults carry no msgid.
        _expect_length(obj, 4, None)
        msgid = _msgid(obj)
        _check_plain(obj[3], "result", None)
        return Response(msgid, _error_body(obj[2]), obj[3])
    if kind == _NOTIFICATION:
        try:
            _expect_length(obj, 3, None)
            return Notification(_method(obj[1], None), _params(obj[2], None))
        except WireError as err:
            err.notification = True
            raise
    raise WireError(INVALID_MESSAGE, "a message's type must be 0, 1 or 2", "type")


def _expect_length(obj: list[Any], length: int, msgid: int | None) -> None:
    if len(obj) != length:
        raise WireError(
            INVALID_MESSAGE,
            "a message of type {type} must have {length} items, not {count}",
            msgid=msgid,
            type=obj[0],
            length=length,
            count=len(obj),
        )


def _msgid(obj: list[Any]) -> int:
    value = obj[1] if len(obj) > 1 else None
    if type(value) is not int or not 0 <= value <= MAX_MSGID:
        raise WireError(
            INVALID_MESSAGE, "msgid must be an integer from 0 to {limit}", "msgid", limit=MAX_MSGID
        )
    return value


def _method(value: Any, msgid: int | None) -> str:
    if not isinstance(value, str):
        raise WireError(INVALID_MESSAGE, "method must be a string", "method", msgid=msgid)
    return value


def _params(value: Any, msgid: int | None) -> dict[str, Any]:
    if not isinstance(value, list) or len(value) > 1:
        raise WireError(
            INVALID_MESSAGE,
            "params must be an array holding at most one map of named parameters",
            "params",
            msgid=msgid,
        )
    if not value:
        return {}
    params = value[0]
    if not isinstance(params, dict):
        raise WireError(
            INVALID_MESSAGE, "params must hold a map of named parameters", "params", msgid=msgid
        )
    _check_plain(params, "params", msgid)
    return params


def _error_body(value: Any) -> ErrorBody | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError(INVALID_MESSAGE, "error must be nil or a map", "error")
    _check_plain(value, "error", None)
    # Keys beyond these three are ignored: a newer daemon may add some.
    return ErrorBody(
        _error_string(value, "code"),
        _error_string(value, "message"),
        _error_string(value, "field", ""),
    )


def _error_string(error: dict[str, Any], name: str, default: str | None = None) -> str:
    item = error.get(name, default)
    if not isinstance(item, str):
        raise WireError(
            INVALID_MESSAGE, "error.{name} must be a string", f"error.{name}", name=name
        )
    return item


def _check_plain(value: Any, path: str, msgid: int | None) -> None:
    """Refuse values that are not plain data, or that nest deeper than ``MAX_NESTING``."""
    if isinstance(value, _PLAIN_SCALARS):
        return
    try:
        _walk(value, 1)
    except _NotPlain as fault:
        where = path + "".join(
            f"[{key}]" if isinstance(key, int) else f".{key}" for key in reversed(fault.keys)
        )
        raise fault.refusal(where, msgid) from None


class _NotPlain(Exception):  # noqa: N818 - internal signal, always turned into a WireError
    """Raised by ``_walk``; each level adds its key while unwinding, so paths cost nothing unless
    something is refused (a 1 MiB message can hold half a million containers).

    ``fault`` is what is wrong: too deep, a key that is not a string, or a value of a type that
    is not plain (``type_name``).
    """

    def __init__(self, fault: Literal["depth", "key", "type"], type_name: str = "") -> None:
        super().__init__(fault)
        self.fault = fault
        self.type_name = type_name
        self.keys: list[str | int] = []

    def refusal(self, where: str, msgid: int | None) -> WireError:
        """The error for the value at ``where``, answering the request ``msgid`` if known."""
        if self.fault == "depth":
            return WireError(
                NESTED_TOO_DEEPLY,
                "{where}: nests more than {limit} arrays and maps deep",
                where,
                msgid=msgid,
                where=where,
                limit=MAX_NESTING,
            )
        if self.fault == "key":
            return WireError(
                INVALID_MESSAGE,
                "{where}: map keys must be strings",
                where,
                msgid=msgid,
                where=where,
            )
        return WireError(
            INVALID_MESSAGE,
            "{where}: {type} is not plain data (no bin or ext)",
            where,
            msgid=msgid,
            where=where,
            type=self.type_name,
        )


def _walk(node: Any, depth: int) -> None:
    # Recursion is safe: it stops one level past MAX_NESTING.
    if depth > MAX_NESTING:
        raise _NotPlain(fault="depth")
    if isinstance(node, dict):
        pairs: Any = node.items()
    elif isinstance(node, list):
        pairs = enumerate(node)
    else:
        raise _NotPlain(fault="type", type_name=type(node).__name__)
    is_map = isinstance(node, dict)
    for key, child in pairs:
        if is_map and not isinstance(key, str):
            raise _NotPlain(fault="key")
        if not isinstance(child, _PLAIN_SCALARS):
            try:
                _walk(child, depth + 1)
            except _NotPlain as fault:
                fault.keys.append(key)
                raise
