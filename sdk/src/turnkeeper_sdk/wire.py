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
  that the decoder stops reading (arrays and maps left open past ``_MAX_SCANNED_DEPTH`` when it
  counts values, else where msgpack itself gives up).
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

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

# msgpack ships no type information; the codec's own signatures are what callers see.
import msgpack  # type: ignore[import-untyped]

from turnkeeper_engine.errors import Arg, ProtocolError
from turnkeeper_engine.model import maker

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

_PLAIN_SCALARS = (str, int, type(None), float, bool)
"""In the order a request's values most often are: ``isinstance`` tries a tuple's types in
turn, and each that fails looks up the value's ``__class__`` besides (~200 instructions)."""
_LONGEST_HEADER = 5
"""Bytes of the longest str, bin or ext header: a type byte and four of length (msgpack reads an
ext's own type byte with its body)."""
_MAX_SCANNED_DEPTH = 4 * MAX_NESTING
"""Deepest nesting a counted decoder lets msgpack build before it is refused outright. Deeper
than ``MAX_NESTING`` (plus the message and params arrays) is refused per message, not fatally;
this bound only stops a message that never closes its arrays from costing a level each."""


_NO_BYTES = memoryview(b"")
"""A decoder's backlog once its bytes are used up."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one message a :class:`Decoder` reads may cost: ``message_bytes`` encoded, and
    ``values`` decoded (arrays, maps and their items; ``None`` leaves them uncounted).

    With ``values`` counted (what a daemon reads from its peers), the decoder reads every header
    itself before msgpack sees it: an array or map counts the items it announces the moment its
    header arrives (msgpack allocates them then, before any item is there), a str, bin or ext
    announcing more than its limit is refused then too, and so is nesting past
    ``_MAX_SCANNED_DEPTH``. Without, msgpack's own bounds hold and the decoder holds no more of
    one string than ``max_value_bytes``.
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


_request = maker(Request)
"""Makes a :class:`Request` by position, as ``Request(...)`` does, without its frozen
``__init__``'s call per field: a daemon decodes one per request."""


@dataclass(frozen=True, slots=True)
class Notification:
    """A one-way message: an event for a subscriber, or an error with no request to answer."""

    method: str
    params: dict[str, Any] = field(default_factory=dict)


Message = Request | Response | Notification


class Packed(bytes):
    """A value encoded already (``pack_value``): as a response's ``result``, :func:`pack` puts
    it in as it is, so a result that answers many requests (a combat's view, between two of its
    commands) is encoded once. Anywhere else it would be sent as a bin value."""


class PackedMap(dict[str, Any]):
    """A map that carries its own encoding, ``packed``, made with it by whoever built both
    (a command's result, whose events were packed already for the store): as a response's
    ``result``, :func:`pack` puts those bytes in as they are. Anywhere else it is the map it
    is. It must not change once made, or the two would tell different things."""

    __slots__ = ("packed",)

    def __init__(self, packed: bytes, /, **entries: Any) -> None:
        super().__init__(entries)
        self.packed = Packed(packed)


_packers = threading.local()


def _packb(value: Any) -> bytes:
    """``msgpack.packb``, with a packer kept per thread: ``packb`` makes a packer, with its
    256 KiB buffer, for every message, which costs a daemon's reply or event a third more than
    the encoding itself. The packer is taken out while it packs: a dict subclass's ``items``
    runs Python, which may pack on this thread too, and then packs with a packer of its own
    rather than into the middle of this message. A packer whose buffer grew past
    ``MAX_MESSAGE_BYTES`` (a message refused as too large) is not kept: msgpack never shrinks
    its buffer, and a thread would hold the largest message it ever tried."""
    packer = _packers.__dict__.pop("packer", None)
    if packer is None:
        packer = msgpack.Packer(use_bin_type=True)
    data: bytes = packer.pack(value)  # resets its buffer, also when it raises
    if len(data) <= MAX_MESSAGE_BYTES:
        _packers.packer = packer
    return data


def pack_value(value: Any) -> Packed:
    """``value`` encoded once, to be a response's ``result`` many times (see ``Packed``)."""
    return Packed(_packb(value))


class WireError(ProtocolError):
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
        super().__init__(code, template, field, **args)
        self.fatal = fatal
        self.msgid = msgid
        self.notification = notification

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def pack(message: Message) -> bytes:
    """Encode one message. Raises ``WireError`` (``message_too_large``) if no peer would take it.

    The error carries the message's msgid, so a server can answer a request with it instead.
    """
    result = message.result if isinstance(message, Response) else None
    if type(result) is PackedMap:
        result = result.packed
    if isinstance(result, Packed):
        assert isinstance(message, Response)
        if message.error is None:
            # ``[1, msgid, nil, result]``: the array's head, the msgid, nil, the result's bytes.
            data = b"".join((b"\x94\x01", _packb(message.msgid), b"\xc0", result))
        else:
            # The array ``[1, msgid, error]``, told it holds four items, then the result's bytes.
            head = _packb(_to_array(message)[:3])
            data = b"\x94" + head[1:] + result
    else:
        data = _packb(_to_array(message))
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
        self._scanner = _Scanner(limits) if limits.values is not None else None
        self._window = _window(limits)
        self._backlog = _NO_BYTES
        self._fed = 0
        self._message_start = 0
        self._fatal: WireError | None = None

    def _new_unpacker(self) -> Any:
        # msgpack checks these bounds as it reads each header; a counted decoder's scanner has
        # read the headers first, and feeds msgpack no further than the message's end and its
        # buffer's room, so for it they are a backstop. Integer map keys and the like are
        # refused by msgpack itself (strict_map_key), so they are fatal; bin and ext values
        # decode and are refused per message in _check_plain.
        return msgpack.Unpacker(raw=False, strict_map_key=True, **self._limits.unpacker_options())

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
            if not self._backlog and self._fed == self._message_start:
                # Every byte pushed is used up and msgpack holds no part of a message: asking
                # it would only raise StopIteration, with a traceback made in its C code
                # (~3,000 instructions), once per request as a connection's reader looks for
                # a message already here before it waits for bytes.
                self._backlog = _NO_BYTES
                return None
            if self._window and self._backlog and self._fed == self._message_start:
                item = self._whole()
                if item is not None:
                    return item
            try:
                obj = next(self._unpacker)
            except StopIteration:
                if not self._backlog:
                    # An empty slice still holds the bytes pushed (up to a whole message, kept
                    # by a connection that then goes quiet): let them go.
                    self._backlog = _NO_BYTES
                    return None
                # msgpack buffers only what it has not parsed yet: the scalar it waits on.
                room = self._limits.max_value_bytes - (self._fed - self._unpacker.tell())
                if self._scanner is None:
                    # Feed no more than the current message may still grow by, so a message
                    # over the limit is refused at its first excess byte.
                    grow = self._limits.message_bytes - (self._fed - self._message_start)
                    if grow <= 0:
                        return self._fail(too_large(self._limits.message_bytes))
                    room = min(room, grow)
                if room <= 0:
                    return self._fail(_value_too_long(self._limits))
                chunk = self._backlog[:room]
                if self._scanner is not None:
                    # Up to the end of the current message at most: the next one is read
                    # under the limits in force once this one is handled.
                    try:
                        chunk = chunk[: self._scanner.scan(chunk)]
                    except WireError as err:
                        return self._fail(err)
                self._backlog = self._backlog[len(chunk) :]
                self._unpacker.feed(chunk)
                self._fed += len(chunk)
                continue
            except ValueError as exc:
                return self._fail(_stream_error(exc))
            # tell() is the end of the object just read; later it also counts a partial one.
            self._message_start = self._unpacker.tell()
            try:
                return _parse(obj)
            except WireError as err:
                return err
        return None

    def _whole(self) -> Message | WireError | None:
        """The next message if it lies whole in the first ``_window`` bytes of the backlog,
        decoded by msgpack at once; None to read it by the scanner (it is longer, not all here,
        or refused: the scanner finds the same fault, at the same byte)."""
        window = self._backlog[: self._window]
        size = len(window)
        # No header may announce more than the window holds: a message that is all there
        # announces less, and what is not has its allocations bounded by the window.
        try:
            obj = msgpack.unpackb(
                window,
                raw=False,
                strict_map_key=True,
                max_str_len=size,
                max_bin_len=size,
                max_ext_len=size,
                max_array_len=size,
                max_map_len=size,
            )
            used = size
        except msgpack.ExtraData as more:
            obj, used = more.unpacked, size - len(more.extra)
        except ValueError:
            return None
        self._backlog = self._backlog[used:]
        try:
            return _parse(obj)
        except WireError as err:
            return err

    def limit(self, limits: Limits) -> None:
        """Hold the messages after the last one returned to ``limits``. Only a counted decoder
        changes them: it never gives msgpack a byte past the message it reads, so the next
        message is read whole under the new limits."""
        # Mostly the very limits in force, passed again before each message: no comparison of
        # their fields (a call of the dataclass's ``__eq__``) for them.
        if limits is self._limits or limits == self._limits:
            return
        assert self._scanner is not None
        assert limits.values is not None
        assert self._fed == self._message_start, "limits change between messages only"
        self._limits = limits
        self._unpacker = self._new_unpacker()
        self._scanner = _Scanner(limits)
        self._window = _window(limits)
        self._fed = self._message_start = 0

    @property
    def pending(self) -> bool:
        """Whether bytes of an incomplete message are held, waiting for the rest."""
        return self._fed != self._message_start or bool(self._backlog)

    def _fail(self, error: WireError) -> WireError:
        self._fatal = error
        self._backlog = _NO_BYTES
        return error


def _window(limits: Limits) -> int:
    """Bytes a counted decoder hands msgpack whole, unscanned (0: none, it counts nothing).

    A message of n bytes nests at most n deep and decodes to fewer than 2n values (each value
    takes a byte at least, and an array or map counts once more for its header), so one no
    longer than this can break neither the scanner's depth nor the values limit, nor its
    size: all of it is here, msgpack may read it at once. Requests mostly arrive one per read
    and far shorter, so most are read so, without a step per value."""
    if limits.values is None:
        return 0
    return min(_MAX_SCANNED_DEPTH, limits.values // 2, limits.message_bytes)


def _value_too_long(limits: Limits) -> WireError:
    return WireError(
        MESSAGE_TOO_LARGE,
        "a value is longer than {limit} bytes",
        fatal=True,
        limit=limits.unpacker_options()["max_str_len"],
    )


_FIXED_SIZES = {
    **dict.fromkeys((0xC0, 0xC1, 0xC2, 0xC3), 0),
    0xCA: 4,
    0xCB: 8,
    **{0xCC + i: 1 << i for i in range(4)},  # uint 8 to 64
    **{0xD0 + i: 1 << i for i in range(4)},  # int 8 to 64
    **{0xD4 + i: 1 + (1 << i) for i in range(5)},  # fixext 1 to 16, with its type byte
}
"""Bytes after the type byte of a value whose size the type byte alone gives (nil, booleans,
numbers, fixext; 0xc1 is never used: msgpack refuses it once fed)."""

_LENGTH_BYTES = {
    0xC4: 1, 0xC5: 2, 0xC6: 4,  # bin
    0xC7: 1, 0xC8: 2, 0xC9: 4,  # ext (a type byte follows the length)
    0xD9: 1, 0xDA: 2, 0xDB: 4,  # str
    0xDC: 2, 0xDD: 4,  # array
    0xDE: 2, 0xDF: 4,  # map
}  # fmt: skip
"""Bytes of length after the type byte of the headers that carry one."""


class _Scanner:
    """Reads the headers of a peer's messages as their bytes arrive, before msgpack does.

    msgpack allocates an array or map the moment its header is read and checks nesting and a
    string's length only later: a message that announces much and never ends would cost the
    daemon what it announced. The scanner counts what each header announces against
    ``Limits.values``, refuses a string, bin or ext longer than the limit and nesting past
    ``_MAX_SCANNED_DEPTH`` when the header arrives, and the message's bytes at the first
    excess one. It passes over bodies by their length, so its work is a step per value.
    """

    def __init__(self, limits: Limits) -> None:
        assert limits.values is not None
        self._limits = limits
        # Read once: the scanner consults them at every header.
        self._max_values = limits.values
        self._max_str = limits.unpacker_options()["max_str_len"]
        self._open: list[int] = []  # the items still due in each array or map being read
        self._skip = 0  # bytes of a body (or of a number) still to pass
        self._kind = 0  # the type byte of a header whose length bytes are still coming
        self._length = bytearray()
        self._need = 0
        self._size = 0  # bytes of the current message so far
        self._values = 0

    def scan(self, data: memoryview) -> int:
        """How many of ``data``'s bytes to feed msgpack: all of them, or up to the end of the
        current message. Raises the fatal ``WireError`` for a message over its limits."""
        limit = self._limits.message_bytes
        at, end = 0, min(len(data), limit - self._size + 1)
        opened = self._open
        # One value per turn: the rest of a body or of a length, or a type byte with as much of
        # its body as is here. This runs for every value a peer sends, so the common types
        # (fixint, fixstr, fixarray, fixmap) are read inline rather than by a method each.
        while at < end:
            if self._skip:
                step = min(self._skip, end - at)
                self._skip -= step
                at += step
                if self._skip:
                    break
            elif self._need:
                step = min(self._need, end - at)
                self._length += data[at : at + step]
                self._need -= step
                at += step
                if self._need or self._header(self._kind, int.from_bytes(self._length)):
                    continue
            else:
                kind = data[at]
                at += 1
                if 0x80 <= kind <= 0x9F:  # fixmap, fixarray
                    items = (kind & 0x0F) << 1 if kind <= 0x8F else kind & 0x0F
                    if self._container(items):
                        continue
                elif 0xA0 <= kind <= 0xBF:  # fixstr
                    length = kind & 0x1F
                    if length > self._max_str:
                        raise _value_too_long(self._limits)
                    if length > end - at:
                        self._skip = length - (end - at)
                        at = end
                        break
                    at += length
                elif 0x7F < kind < 0xE0:  # not a fixint: a header the type byte does not size
                    size = _FIXED_SIZES.get(kind)
                    if size is None:
                        self._kind, self._need = kind, _LENGTH_BYTES[kind]
                        self._length.clear()
                        continue
                    if size > end - at:
                        self._skip = size - (end - at)
                        at = end
                        break
                    at += size
            # A value is whole: it completes the arrays and maps it ends, and maybe the message.
            while opened:
                opened[-1] -= 1
                if opened[-1]:
                    break
                opened.pop()
            else:
                break
        self._size += at
        if self._size > limit:
            raise too_large(limit)
        if not opened and not self._skip and not self._need:
            self._size = self._values = 0
        return at

    def _container(self, items: int) -> bool:
        """An array or map header announcing ``items`` values; True when it opens one (False:
        it is empty, a whole value)."""
        self._values += 1 + items
        if self._values > self._max_values:
            raise WireError(
                MESSAGE_TOO_LARGE,
                "a message decodes to more than {limit} values",
                fatal=True,
                limit=self._max_values,
            )
        if not items:
            return False
        if len(self._open) >= _MAX_SCANNED_DEPTH:
            raise WireError(NESTED_TOO_DEEPLY, "the msgpack data nests too deeply", fatal=True)
        self._open.append(items)
        return True

    def _header(self, kind: int, length: int) -> bool:
        """A header's length has come; False when it is a whole value already (an empty
        string or container)."""
        if kind >= 0xDC:  # array 16 and 32, map 16 and 32
            return self._container(length * 2 if kind >= 0xDE else length)
        if length > self._max_str:
            raise _value_too_long(self._limits)
        self._skip = length + (1 if kind in (0xC7, 0xC8, 0xC9) else 0)
        return bool(self._skip)


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
    if kind == _REQUEST and len(obj) == 4:
        # The common case first, checked as the general one below would, in fewer steps.
        msgid, method, params = obj[1], obj[2], obj[3]
        if (
            type(msgid) is int
            and 0 <= msgid <= MAX_MSGID
            and type(method) is str
            and type(params) is list
            and len(params) == 1
            and type(params[0]) is dict
        ):
            _check_plain(params[0], "params", msgid)
            return _request(msgid, method, params[0])
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
    # A request's params are a map: told by its class, before five ``isinstance`` that fail.
    kind = type(value)
    if kind is not dict and kind is not list and isinstance(value, _PLAIN_SCALARS):
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
