"""Commands, events and states as plain data (dicts, lists, str, int, float, bool, None) and back.

This is the seam for every transport and store: a wire codec or a database only ever sees plain
data. Decoding checks every field against the value's type hints, so malformed input is refused
with the path of the offending field and nothing half-built escapes.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from . import commands as cmd
from . import events as ev
from .errors import Arg, TemplatedError
from .model import Done, Event, History, State, Stretch, maker

Plain = None | bool | int | float | str | list["Plain"] | dict[str, "Plain"]
T = TypeVar("T")

MAX_DEPTH = 32
"""Deepest nesting decoded: the engine's own values nest far less; more is hostile input."""


class PlainError(ValueError, TemplatedError):
    """Plain data that does not decode. ``field`` is the path of the offending value; the
    message is a template with named arguments, like every error (see ``errors``)."""

    def __init__(self, template: str, field: str, **args: Arg) -> None:
        TemplatedError.__init__(self, template, args)
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def within(self, path: str) -> PlainError:
        """The same error, its field made absolute: it was found in the value at ``path``."""
        return PlainError(self.template, _within(path, self.field), **dict(self.args))


_SCALARS = frozenset({str, int, float, bool, type(None)})


EVENT_TAG = "event"
"""Key of an event's name in its plain form: ``{"event": name, **fields}``."""


def _plain_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """A dataclass's fields that have a plain form: all but a memo (``State.measured``)."""
    return tuple(f for f in dataclasses.fields(cls) if f.metadata.get("plain", True))


@cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names, looked up once per class (this is the hot path of every
    reply, event and snapshot)."""
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in _plain_fields(cls))
    return None


@cache
def _tag(cls: type) -> str | None:
    """An event class's name, which its plain form carries (the state's undo history holds
    events of any kind, so decoding must tell which); None for other classes."""
    return cls.name if issubclass(cls, Event) else None


_ENCODERS: dict[type, Callable[[Any], dict[str, Plain]]] = {}
"""The plain form of each record class, made once by ``_encoder``."""


def _encoder(cls: type) -> Callable[[Any], dict[str, Plain]]:
    """``to_plain`` for records of ``cls``, written once as Python source: each field read
    directly and a scalar kept as it is, without a call (every event, reply and snapshot
    goes through here). A field whose type names one record class, or a tuple of them, calls
    that class's encoder itself rather than going through ``to_plain``'s dispatch twice per
    value (``_plain_code``). The map's keys are in the order the generic walk gave them (an
    event's name first), so the encoded bytes are the same."""
    names = _field_names(cls) or ()
    hints = _field_hints(cls)
    tag = _tag(cls)
    scope: dict[str, Any] = {"S": _SCALARS, "to_plain": to_plain, "E": _ENCODERS}
    lines = ["def encode(v):"]
    entries = [f"{EVENT_TAG!r}: {tag!r}"] if tag is not None else []
    _MAKING.add(cls)
    try:
        for i, n in enumerate(names):
            x = f"x{i}"
            lines.append(f"    {x} = v.{n}")
            code = _nested_code(hints.get(n), x, i, scope, _encoder_of, "to_plain", _PLAIN_EACH)
            entries.append(f"{n!r}: {x} if type({x}) in S else {code}")
    finally:
        _MAKING.discard(cls)
    lines.append(f"    return {{{', '.join(entries)}}}")
    # Made from the class's own field names and type hints, as dataclasses makes its methods.
    exec("\n".join(lines) + "\n", scope)
    made: Callable[[Any], dict[str, Plain]] = scope["encode"]
    _ENCODERS[cls] = made
    return made


def _field_hints(cls: type) -> dict[str, Any]:
    """The type hints of a record's fields, which its encoder and sizer are written from; none
    for a class whose hints do not resolve (a caller's own record given to ``to_plain``): its
    fields then go through the generic call, as they did before there were hints."""
    try:
        return _hints(cls)
    except Exception:  # any failure to resolve them means: no hints
        return {}


_MAKING: set[type] = set()
"""Record classes whose encoder or sizer is being written: a field of a class that holds it
back (a stretch's checkpoint state) goes through the generic call instead."""


def _record_of(hint: Any) -> type | None:
    """The one record class a field of type ``hint`` holds (``R`` or ``R | None``), if any."""
    if isinstance(hint, type):
        return hint if _field_names(hint) is not None else None
    origin, args = _shape(hint)
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1:
            return _record_of(kinds[0])
    return None


def _items_of(hint: Any) -> Any:
    """The item type of a field of type ``tuple[X, ...]`` (``X``), None for any other."""
    origin, args = _shape(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


_PLAIN_EACH = (
    "y if type(y) in S else to_plain(y)",
    "(E.get(type(y)) or to_plain)(y)",
    "[{each} for y in {x}] if {x} else []",
)
"""``_nested_code``'s pieces for ``to_plain``: an item of scalars, an item of any record
class, a tuple from its items' code (``{each}``)."""


def _nested_code(
    hint: Any,
    x: str,
    i: int,
    scope: dict[str, Any],
    made_for: Callable[[type], Callable[[Any], Any] | None],
    generic: str,
    pieces: tuple[str, str, str],
) -> str:
    """The expression for the value ``x`` of a field of type ``hint`` that is not a scalar,
    as ``generic`` (``to_plain`` or ``size``) makes it: for a record of the one class the
    hint names, or a tuple of them, that class's own function (``made_for``) is called
    directly when the value is of that class, and ``generic`` is called for anything else,
    so the result is ``generic``'s whatever the value holds."""
    record = _record_of(hint)
    if record is not None:
        made = made_for(record)
        if made is None:
            return f"{generic}({x})"
        scope[f"f{i}"], scope[f"r{i}"] = made, record
        return f"(f{i}({x}) if type({x}) is r{i} else {generic}({x}))"
    item = _items_of(hint)
    if item is None:
        return f"{generic}({x})"
    scalar, polymorphic, whole = pieces
    record = _record_of(item)
    if record is None:
        each = scalar
    elif record.__subclasses__():  # an event of any kind (``Done.events``)
        each = polymorphic
    else:
        made = made_for(record)
        if made is None:
            each = f"{generic}(y)"
        else:
            scope[f"f{i}"], scope[f"r{i}"] = made, record
            each = f"f{i}(y) if type(y) is r{i} else {generic}(y)"
    return f"(({whole.format(each=each, x=x)}) if type({x}) is tuple else {generic}({x}))"


def _encoder_of(cls: type) -> Callable[[Any], Any] | None:
    """The encoder of ``cls`` to call from another's, made now if need be; None while it is
    being made (a class that holds itself, through others)."""
    if cls in _MAKING:
        return None
    return _ENCODERS.get(cls) or _encoder(cls)


def to_plain(value: Any) -> Plain:
    """Encode a value of the engine's model (dataclasses, tuples, frozensets) as plain data."""
    kind = type(value)
    if kind in _SCALARS:
        return value  # type: ignore[no-any-return]
    if kind is tuple or kind is list:
        return [v if type(v) in _SCALARS else to_plain(v) for v in value]
    encode = _ENCODERS.get(kind)
    if encode is not None:
        return encode(value)
    if _field_names(typing.cast(type, kind)) is not None:
        return _encoder(kind)(value)
    if kind is frozenset:
        return sorted(to_plain(v) for v in value)  # type: ignore[type-var]
    raise TypeError(f"{kind.__name__} has no plain form")


def _int_size(value: int) -> int:
    if -32 <= value <= 127:
        return 1
    if value >= 0:
        return 2 if value <= 0xFF else 3 if value <= 0xFFFF else 5 if value <= 0xFFFFFFFF else 9
    return 2 if value >= -(2**7) else 3 if value >= -(2**15) else 5 if value >= -(2**31) else 9


def _str_size(value: str) -> int:
    n = len(value.encode())
    return n + (1 if n < 32 else 2 if n < 0x100 else 3 if n < 0x10000 else 5)


def header_size(items: int) -> int:
    """What the header of an array or a map of ``items`` takes, encoded."""
    return 1 if items < 16 else 3 if items < 0x10000 else 5


@cache
def _keys_size(cls: type) -> tuple[tuple[str, ...], int]:
    """A record's field names and what its map's header and keys take, once per class."""
    names = _field_names(cls) or ()
    tag = _tag(cls)
    if tag is None:
        return names, header_size(len(names)) + sum(_str_size(n) for n in names)
    keys = (EVENT_TAG, *names)
    return names, header_size(len(keys)) + sum(_str_size(n) for n in keys) + _str_size(tag)


def keys_size(cls: type) -> int:
    """What a record of class ``cls`` takes encoded besides its fields' values: its map's
    header and keys (and an event's name)."""
    return _keys_size(cls)[1]


def encoded_size(value: Any) -> int:
    """How many bytes ``value`` (plain data, or a model value as ``to_plain`` gives it) takes
    encoded as MessagePack in its shortest forms, as the protocol's codec writes it, counted
    without encoding it (the engine encodes nothing)."""
    kind = type(value)
    if value is None or kind is bool:
        return 1
    if kind is int:
        return _int_size(value)
    if kind is float:
        return 9
    if kind is str:
        return _str_size(value)
    if kind is tuple or kind is list or kind is frozenset:
        return header_size(len(value)) + sum(encoded_size(v) for v in value)
    if kind is dict:
        entries = sum(encoded_size(k) + encoded_size(v) for k, v in value.items())
        return header_size(len(value)) + entries
    sizer = _SIZERS.get(kind)
    if sizer is None:
        sizer = _sizer(typing.cast(type, kind))
    return sizer(value)


_SIZERS: dict[type, Callable[[Any], int]] = {}
"""``encoded_size`` of each record class, made once by ``_sizer``."""


def _sizer(cls: type) -> Callable[[Any], int]:
    """``encoded_size`` for records of ``cls``, written once as Python source like
    ``_encoder``: its keys' size and each field's, read directly, a string's inline, and a
    record (or a tuple of records) of the one class a field's type names by that class's
    sizer directly (a size check measures each value a command adds)."""
    names, size = _keys_size(cls)
    if not names:
        raise TypeError(f"{cls.__name__} has no plain form")
    hints = _field_hints(cls)
    scope: dict[str, Any] = {
        "size": encoded_size,
        "int_size": _int_size,
        "str_size": _str_size,
        "hs": header_size,
        "Z": _SIZERS,
    }
    # The scalars most fields hold are sized here, without going through ``encoded_size``'s
    # dispatch: a record's size is mostly its strings'.
    lines = ["def sized(v):", f"    n = {size}"]
    _MAKING.add(cls)
    try:
        for i, n in enumerate(names):
            code = _nested_code(hints.get(n), "x", i, scope, _sizer_of, "size", _SIZE_EACH)
            lines += [
                f"    x = v.{n}",
                "    t = type(x)",
                "    if t is str:",
                "        m = len(x.encode())",
                "        n += m + (1 if m < 32 else 2 if m < 0x100 else 3 if m < 0x10000 else 5)",
                "    elif x is None or t is bool:",
                "        n += 1",
                "    elif t is int:",
                "        n += int_size(x)",
                "    else:",
                f"        n += {code}",
            ]
    finally:
        _MAKING.discard(cls)
    lines += ["    return n", ""]
    # Made from the class's own field names and type hints, as dataclasses makes its methods.
    exec("\n".join(lines), scope)
    made: Callable[[Any], int] = scope["sized"]
    _SIZERS[cls] = made
    return made


_SIZE_EACH = (
    "str_size(y) if type(y) is str else size(y)",
    "(Z.get(type(y)) or size)(y)",
    "hs(len({x})) + sum([{each} for y in {x}]) if {x} else 1",
)
"""``_nested_code``'s pieces for ``encoded_size`` (see ``_PLAIN_EACH``)."""


def _sizer_of(cls: type) -> Callable[[Any], Any] | None:
    """The sizer of ``cls`` to call from another's (see ``_encoder_of``)."""
    if cls in _MAKING or not _field_names(cls):
        return None
    return _SIZERS.get(cls) or _sizer(cls)


REF = "@"
"""Key of a reference to a shared node in ``to_shared`` data."""


def to_shared(value: Any) -> dict[str, Plain]:
    """Encode ``value`` like ``to_plain``, but each model object held in more than one place
    once, as a node the places refer to: a state and the checkpoints of its undo history share
    most of their parts, and so does this encoding (snapshots). An object held once (most
    events kept for undo) is written in place: a node and its reference would only add bytes."""
    holders: dict[int, int] = {}

    def count(v: Any) -> None:
        """How many places hold each dataclass and non-empty tuple (below the first one's)."""
        names = _field_names(typing.cast(type, type(v)))
        if names is None and not (isinstance(v, tuple) and v):
            if isinstance(v, list | frozenset):
                for x in v:
                    count(x)
            return
        seen = holders.get(id(v), 0)
        holders[id(v)] = seen + 1
        if not seen:
            for x in v if names is None else (getattr(v, n) for n in names):
                count(x)

    count(value)
    nodes: list[Plain] = []
    index: dict[int, int] = {}

    def encode(v: Any) -> Plain:
        kind = typing.cast(type, type(v))
        names = _field_names(kind)
        if names is None and not (isinstance(v, tuple) and v):
            if isinstance(v, tuple | list):
                return [encode(x) for x in v]
            if isinstance(v, frozenset):
                return sorted(encode(x) for x in v)  # type: ignore[type-var]
            return to_plain(v)
        at = index.get(id(v))
        if at is not None:
            return {REF: at}
        if names is None:
            body: Plain = [encode(x) for x in v]
        else:
            tag = _tag(kind)
            fields: dict[str, Plain] = {} if tag is None else {EVENT_TAG: tag}
            fields.update((n, encode(getattr(v, n))) for n in names)
            body = fields
        if holders[id(v)] == 1:
            return body
        at = index[id(v)] = len(nodes)
        nodes.append(body)
        return {REF: at}

    root = encode(value)
    return {"nodes": nodes, "root": root}


def from_shared(tp: type[T], data: Mapping[str, Any]) -> T:
    """Decode what ``to_shared`` made; shared nodes become shared objects again. A state
    encoded by an older daemon, with the prior states it kept for undo, gets the same undo
    reach from them (``evolve.history_of_states``)."""
    if not isinstance(data, Mapping):
        raise PlainError("must be a map", "")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise PlainError("must be an array", "nodes")
    return _decode(tp, data.get("root"), "root", 0, _Shared(nodes), True)  # type: ignore[no-any-return]


class _Shared:
    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes
        self.decoded: dict[int, Any] = {}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_plain(tp: Any, data: Any, *, strict: bool = True) -> Any:
    """Decode ``data`` as a value of type ``tp``, or raise ``PlainError`` naming the field.

    ``strict`` refuses a field ``tp`` does not have: what a client sends and what the store
    holds is decoded so. A client decodes what a daemon sent with ``strict=False``, skipping
    the fields it does not know: a newer daemon may add optional fields (protocol.md, API
    contract), and a client must go on working."""
    fast = _FAST.get(tp)
    if fast is not None and type(data) is dict:
        # A command a client sent, straight to its class's decoder (``_dataclass`` would
        # call it after the general dispatch).
        made = fast(data, 0, None, strict)
        if made is not _SLOW:
            return made
    return _decode(tp, data, "", 0, None, strict)


def _decode(
    tp: Any, data: Any, field: str, depth: int, shared: _Shared | None, strict: bool
) -> Any:
    if depth > MAX_DEPTH:
        raise PlainError("nested too deeply", field)
    if tp in _SCALARS:
        return _scalar(tp, data, field)
    origin, args = _shape(tp)
    if tp is Any:
        return data
    if origin is Literal:
        if data not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise PlainError("must be one of {allowed}", field, allowed=allowed)
        return _interned(data) if isinstance(data, str) else data
    if origin in (Union, types.UnionType):
        options = args
        if data is None:
            if type(None) in options:
                return None
            raise PlainError("must not be null", field)
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, data, field, depth + 1, shared, strict)
            except PlainError as e:
                errors.append(e)
        raise errors[0]
    if origin is tuple:
        if shared is not None and isinstance(data, Mapping):
            return _shared_node(tp, data, field, depth, shared, strict)
        if not isinstance(data, list | tuple):
            raise PlainError("must be an array", field)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(args[0], v) for v in data]
        elif len(data) != len(args):
            raise PlainError("must have {count} items", field, count=len(args))
        else:
            items = list(zip(args, data, strict=True))
        decoded = []
        for i, (arg, v) in enumerate(items):
            try:
                decoded.append(_decode(arg, v, "", depth + 1, shared, strict))
            except PlainError as e:
                # Paths are built only on the way out of a failure, not for every value.
                raise e.within(f"{field}[{i}]") from None
        return tuple(decoded)
    if origin is frozenset:
        if not isinstance(data, list | tuple):
            raise PlainError("must be an array", field)
        (arg,) = args
        return frozenset(_decode(arg, v, f"{field}[]", depth + 1, shared, strict) for v in data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if shared is not None and isinstance(data, Mapping) and REF in data:
            return _shared_node(tp, data, field, depth, shared, strict)
        return _dataclass(tp, data, field, depth, shared, strict)
    return _scalar(tp, data, field)


INTERN_MAX = 64
"""Longest decoded string made one object with its copies: ids, kinds and names are short."""


def _interned(text: str) -> str:
    """One object for every decoded copy of a short ``text``: ids, kinds and names recur in
    every command and event about them, and a combat keeps the events of its last commands for
    undo (and a rebuild decodes thousands). Interned strings are freed once unused."""
    return sys.intern(str(text)) if len(text) <= INTERN_MAX else text


def _scalar(tp: Any, data: Any, field: str) -> Any:
    if tp is bool:
        if not isinstance(data, bool):
            raise PlainError("must be a boolean", field)
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise PlainError("must be an integer", field)
        return data
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise PlainError("must be a number", field)
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise PlainError("must be a string", field)
        return _interned(data)
    raise TypeError(f"no plain decoding for {tp!r}")


def _shared_node(tp: Any, data: Any, field: str, depth: int, shared: _Shared, strict: bool) -> Any:
    """A model object or tuple stored once in ``to_shared`` data, decoded once."""
    ref = data.get(REF) if isinstance(data, Mapping) else None
    if isinstance(ref, bool) or not isinstance(ref, int) or not 0 <= ref < len(shared.nodes):
        raise PlainError("must be a node reference", field)
    if ref not in shared.decoded:
        body, path = shared.nodes[ref], f"nodes[{ref}]"
        if get_origin(tp) is tuple:
            if not isinstance(body, list):
                raise PlainError("must be an array", path)
            shared.decoded[ref] = _decode(tp, body, path, depth + 1, shared, strict)
        else:
            shared.decoded[ref] = _dataclass(tp, body, path, depth, shared, strict)
    node = shared.decoded[ref]
    expected = tuple if get_origin(tp) is tuple else tp
    if not isinstance(node, expected):
        raise PlainError("node {ref} is not a {type}", field, ref=ref, type=expected.__name__)
    return node


@cache
def _layout(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type hint, required) of each field, worked out once per class."""
    hints = _hints(cls)
    return tuple(
        (
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in _plain_fields(cls)
    )


def _dataclass(
    tp: type[T], data: Any, field: str, depth: int, shared: _Shared | None, strict: bool
) -> T:
    if not isinstance(data, Mapping):
        raise PlainError("must be a map", field)
    if tp is Event:
        tp, data = _event_body(data, field)  # type: ignore[assignment]
    cls = typing.cast(type, tp)
    if cls is State:
        if _old_undo(data.get("undo"), shared):
            return _old_state(data, field, depth, shared, strict)  # type: ignore[return-value]
    else:
        made = (_FAST.get(cls) or _fast(cls))(data, depth, shared, strict)
        if made is not _SLOW:
            return made  # type: ignore[no-any-return]
    layout = _layout(cls)
    names = _names_of(cls)
    if strict:
        for key in data:
            if key not in names:
                raise PlainError("unknown field", f"{field}.{key}" if field else str(key))
    values = {}
    for name, hint, required in layout:
        if name in data:
            try:
                values[name] = _decode(hint, data[name], "", depth + 1, shared, strict)
            except PlainError as e:
                path = f"{field}.{name}" if field else name
                raise e.within(path) from None
        elif required:
            raise PlainError("is required", f"{field}.{name}" if field else name)
    return tp(**values)


_SLOW = object()
"""What a fast decoder (``_fast``) returns for data it does not take as it is."""
_FAST: dict[type, Callable[[Any, int, _Shared | None, bool], Any]] = {}
"""The fast decoder of each record class, made once by ``_fast``."""


def _fast(cls: type) -> Callable[[Any, int, _Shared | None, bool], Any]:
    """A decoder for records of ``cls`` written once as Python source, as ``_encoder`` is:
    each field read directly and a string, integer, boolean, optional string or string
    literal checked inline, without a call (every command a client sends is decoded so).
    It only ever accepts: for data it does not take exactly as it is (a field missing, of
    another type, unknown, too deep) it returns ``_SLOW``, and ``_dataclass`` decodes it the
    general way, which refuses it with its field and message or decodes it as it would have
    anyway. So the values it makes and the errors raised are those of ``_dataclass``."""
    scope: dict[str, Any] = {
        "SLOW": _SLOW,
        "cls": cls,
        "names": _names_of(cls),
        "intern": sys.intern,
        "decode": _decode,
        "PlainError": PlainError,
    }
    layout = _layout(cls)
    make = _positional_maker(cls, len(layout))
    lines = [
        "def fast(d, depth, shared, strict):",
        f"    if depth >= {MAX_DEPTH} or (strict and not names.issuperset(d)):",
        "        return SLOW",
    ]
    if make is None:
        lines.append("    k = {}")
    defaults = {f.name: f for f in dataclasses.fields(cls)}
    for i, (name, hint, required) in enumerate(layout):
        lines += [f"    if {name!r} in d:", f"        v = d[{name!r}]"]
        lines += [f"        {line}" for line in _fast_check(hint, i, scope)]
        lines += [f"        k[{name!r}] = v" if make is None else f"        a{i} = v"]
        if required:
            lines += ["    else:", "        return SLOW"]
        elif make is not None:
            # A field left out gets its default, as ``__init__`` gives it.
            default = defaults[name]
            if default.default_factory is not dataclasses.MISSING:
                scope[f"factory{i}"] = default.default_factory
                lines += ["    else:", f"        a{i} = factory{i}()"]
            else:
                scope[f"default{i}"] = default.default
                lines += ["    else:", f"        a{i} = default{i}"]
    if make is None:
        lines += ["    return cls(**k)", ""]
    else:
        # Every field by position (``maker``): no dict of keywords, and no frozen
        # ``__init__`` setting each field through ``object.__setattr__``.
        scope["make"] = make
        lines += [f"    return make({', '.join(f'a{i}' for i in range(len(layout)))})", ""]
    # Made from the class's own field names and type hints, as dataclasses makes its methods.
    exec("\n".join(lines), scope)
    made: Callable[[Any, int, _Shared | None, bool], Any] = scope["fast"]
    _FAST[cls] = made
    return made


def _positional_maker(cls: type, plain: int) -> Callable[..., Any] | None:
    """``maker(cls)`` when a record of ``cls`` is all its plain fields, each set by its
    ``__init__`` and none of them checked after (no ``__post_init__``), so that making it
    from every field's value is what ``cls(...)`` does; else None."""
    every = dataclasses.fields(cls)
    if len(every) != plain or hasattr(cls, "__post_init__") or not all(f.init for f in every):
        return None
    try:
        return maker(cls)
    except TypeError:
        return None  # not a record with slots (``model._draft``)


def _fast_check(hint: Any, i: int, scope: dict[str, Any]) -> list[str]:
    """The lines that check ``v``, the value of a field of type ``hint``, and make it what
    ``_decode`` makes of it (returning ``SLOW`` where they do not take it)."""
    text = [
        "if type(v) is not str:",
        "    return SLOW",
        f"if len(v) <= {INTERN_MAX}:",
        "    v = intern(v)",
    ]
    if hint is str:
        return text
    if hint is int or hint is bool:
        return [f"if type(v) is not {hint.__name__}:", "    return SLOW"]
    origin, args = _shape(hint)
    if origin in (Union, types.UnionType) and set(args) == {str, type(None)}:
        return ["if v is not None:", *(f"    {line}" for line in text)]
    if origin is Literal and all(type(a) is str for a in args):
        scope[f"allowed{i}"] = frozenset(args)
        return [f"if type(v) is not str or v not in allowed{i}:", "    return SLOW", *text[2:]]
    scope[f"hint{i}"] = hint
    return [
        "try:",
        f"    v = decode(hint{i}, v, '', depth + 1, shared, strict)",
        "except PlainError:",
        "    return SLOW",
    ]


def _event_body(data: Mapping[str, Any], field: str) -> tuple[type[Event], Mapping[str, Any]]:
    """The class of the event ``data`` names, and its fields (upgraded if an older daemon
    recorded it)."""
    name = data.get(EVENT_TAG)
    cls = ev.EVENTS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise PlainError("unknown event", _within(field, EVENT_TAG))
    return cls, {k: v for k, v in _upgraded(data).items() if k != EVENT_TAG}


def _old_undo(undo: Any, shared: _Shared | None) -> bool:
    """Whether a state's ``undo`` is in the form older daemons stored: the prior states, an
    array (or, shared, a reference to one) where today's history is a map."""
    if isinstance(undo, list):
        return True
    if shared is None or not isinstance(undo, Mapping):
        return False
    ref = undo.get(REF)
    return (
        isinstance(ref, int)
        and 0 <= ref < len(shared.nodes)
        and isinstance(shared.nodes[ref], list)
    )


def _old_state(
    data: Mapping[str, Any], field: str, depth: int, shared: _Shared | None, strict: bool
) -> State:
    """A state an older daemon encoded, its prior states made into today's history."""
    path = f"{field}.undo" if field else "undo"
    try:
        states = _decode(tuple[State, ...], data["undo"], "", depth + 1, shared, strict)
    except PlainError as e:
        raise e.within(path) from None
    rest = {k: v for k, v in data.items() if k != "undo"}
    state: State = _dataclass(State, rest, field, depth, shared, strict)
    return dataclasses.replace(state, undo=_old_history(states, state))


def _old_history(states: tuple[State, ...], state: State) -> History:
    """The undo history of ``state`` from the prior states an older daemon kept (the state
    before each of its last commands, oldest first): each is the checkpoint of a stretch of
    one command, which an undo returns to without folding anything; the commands that come
    next start a stretch from ``state`` itself."""
    if not states:
        return History()
    after = (*states[1:], state)
    stretches = tuple(
        Stretch(_checkpoint(s), (Done(a.last_command),)) for s, a in zip(states, after, strict=True)
    )
    return History((*stretches, Stretch(_checkpoint(state))), len(states))


def _checkpoint(state: State) -> State:
    """``state`` as a stretch starts from: the log's fields are never a checkpoint's."""
    return dataclasses.replace(state, undo=History(), seq=0, secrets=(), measured=None)


def _within(path: str, inner: str) -> str:
    """``inner`` (a path relative to the value at ``path``) made absolute."""
    if not inner:
        return path
    return path + inner if inner.startswith("[") else f"{path}.{inner}"


@cache
def _shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    return get_origin(tp), get_args(tp)


@cache
def _names_of(cls: type) -> frozenset[str]:
    return frozenset(name for name, _, _ in _layout(cls))


def _tagged(tag: str, name: str, value: Any) -> dict[str, Plain]:
    body = to_plain(value)
    assert isinstance(body, dict)
    return {tag: name, **body}


def _untagged(tag: str, known: Mapping[str, type[T]], data: Mapping[str, Any]) -> T:
    name = data.get(tag)
    cls = known.get(name) if isinstance(name, str) else None
    if cls is None:
        raise PlainError("unknown command", tag)
    return from_plain(cls, {k: v for k, v in data.items() if k != tag})  # type: ignore[no-any-return]


def command_to_plain(command: cmd.Command) -> dict[str, Plain]:
    """A command as ``{"command": name, **fields}``."""
    return _tagged("command", command.name, command)


def command_from_plain(data: Mapping[str, Any]) -> cmd.Command:
    return _untagged("command", cmd.COMMANDS, data)


def event_to_plain(event: ev.Event) -> dict[str, Plain]:
    """An event as ``{"event": name, **fields}``."""
    # Its class's encoder, called here once made: ``to_plain``'s dispatch (and a ``cast``) are
    # two calls more for every event the writer commits.
    encode = _ENCODERS.get(type(event))
    return encode(event) if encode is not None else _encoder(type(event))(event)


def event_from_plain(data: Mapping[str, Any]) -> ev.Event:
    """The event ``event_to_plain`` made ``data`` from."""
    return from_plain(Event, data)  # type: ignore[no-any-return]


def _upgraded(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """An event recorded by an older daemon, in today's words. ``hold_planned`` said
    ``when``/``other`` (``"open"`` and ``""`` for a reset) before it took ``Hold``'s
    ``plan``/``target``."""
    if data.get("event") != "hold_planned" or "when" not in data:
        return data
    old = dict(data)
    when, other = old.pop("when"), old.pop("other", None)
    reset = when == "open"
    return {**old, "plan": None if reset else when, "target": None if reset else other}
