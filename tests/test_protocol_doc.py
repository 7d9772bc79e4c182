"""protocol.md is the client author's only reference: it must match the code, both ways.

Every method, event, error code and limit the daemon has is documented, and everything documented
exists; each command's, event's and type's field table lists exactly its fields; the byte-level
examples decode to what the page says, and a real daemon sends the bytes the page shows.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from daemon import running
from turnkeeper.methods import METHODS
from turnkeeper.transport.session import HANDLERS
from turnkeeper_engine import commands as cmd
from turnkeeper_engine import events as ev
from turnkeeper_engine import model, views
from turnkeeper_sdk import wire
from turnkeeper_sdk.methods import COMMAND_ENVELOPE, WHO_TEXT

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "protocol.md").read_text()
SOURCES = ("daemon/src", "sdk/src", "engine/src", "plugins")

# Each constructor whose first argument is an error code, as a string literal.
LITERAL_CODE = re.compile(
    r"\b(?:reject|Rejected|RuleError|RequestError|AuthError|StoreError|WireError|close_with"
    r"|ErrorBody|_error_note|_NotPlain)\(\s*[\"']([a-z][a-z0-9_]*)[\"']"
)
# The same constructors with a module constant instead (the wire codec's codes).
CONSTANT_CODE = re.compile(
    r"\b(?:WireError|_NotPlain|close_with|_error_note)\(\s*(?:wire\.)?([A-Z][A-Z0-9_]*)\b"
)
LIMIT_MODULES = {
    "wire": "turnkeeper_sdk.wire",
    "app": "turnkeeper.app",
    "channel": "turnkeeper.transport.channel",
    "listeners": "turnkeeper.transport.listeners",
    "session": "turnkeeper.transport.session",
    "methods": "turnkeeper.methods",
    "registry": "turnkeeper.combats.registry",
    "rebuild": "turnkeeper.combats.rebuild",
    "fanout": "turnkeeper.combats.fanout",
    "listing": "turnkeeper.combats.listing",
    "hooks": "turnkeeper.combats.hooks",
    "clock": "turnkeeper.combats.clock",
    "store": "turnkeeper.store",
    "auth": "turnkeeper.auth",
    "tables": "turnkeeper.tables",
    "tokens": "turnkeeper.stores.tokens",
    "decide": "turnkeeper_engine.decide",
    "evolve": "turnkeeper_engine.evolve",
    "plain": "turnkeeper_engine.plain",
    "plugins": "turnkeeper_sdk.plugins",
    "watchdog": "turnkeeper.watchdog",
    "websocket": "turnkeeper.transport.websocket",
}
RESERVED_EVENT_KEYS = {"combat", "seq", "event", "summary"}


# Reading the page --------------------------------------------------------------------------------


def _headings(level: int) -> list[str]:
    return re.findall(rf"^{'#' * level} `([a-z_]+)`$", DOC, flags=re.M)


def _section(heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = DOC.index(f"\n{heading}\n") + len(heading) + 2
    following = re.compile(rf"^#{{1,{level}}} ", re.M).search(DOC, start)
    return DOC[start : following.start() if following else len(DOC)]


def _tables(text: str, first_header: str) -> list[list[list[str]]]:
    """Rows (cells stripped) of every table in ``text`` whose first header cell is given."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        # A cell's own pipes are escaped (`"before"` \| `"after"`).
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if current is None:
            current = [] if cells[0] == first_header else None
            if current is not None:
                tables.append(current)
        elif not set(cells[0]) <= set("-: "):
            current.append(cells)
    return tables


def _first_column(text: str, first_header: str) -> list[str]:
    names = []
    for table in _tables(text, first_header):
        for row in table:
            found = re.fullmatch(r"`([^`]+)`", row[0])
            assert found, f"{row[0]!r} in a {first_header!r} table is not one backticked name"
            names.append(found.group(1))
    return names


def _field_names(heading: str) -> list[str]:
    return _first_column(_section(heading), "Field")


def _missing(wanted: set[str], have: set[str], what: str) -> str:
    return f"{what}: {sorted(wanted - have)}"


# Reading the code ---------------------------------------------------------------------------------


def _source_files() -> list[Path]:
    return [p for root in SOURCES for p in sorted((ROOT / root).rglob("*.py"))]


def _codes_in_source() -> dict[str, set[str]]:
    """Every error code a constructor in the source is called with, and the files it is in."""
    found: dict[str, set[str]] = {}
    for path in _source_files():
        text = path.read_text()
        codes = set(LITERAL_CODE.findall(text))
        for constant in CONSTANT_CODE.findall(text):
            value = getattr(wire, constant, None)
            assert isinstance(value, str), f"{path}: {constant} is not a wire code constant"
            codes.add(value)
        for code in codes:
            found.setdefault(code, set()).add(str(path.relative_to(ROOT)))
    return found


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


# Methods, events, errors, both ways ---------------------------------------------------------------


def test_every_method_is_documented_and_every_documented_method_exists() -> None:
    documented = set(_headings(3))
    assert set(METHODS) <= documented, _missing(set(METHODS), documented, "undocumented methods")
    assert documented <= set(METHODS), _missing(documented, set(METHODS), "documented, no method")
    assert len(_headings(3)) == len(documented), "a method is documented twice"


def test_every_method_has_a_handler_and_every_handler_a_method() -> None:
    assert set(HANDLERS) == set(METHODS)


def test_every_event_is_documented_and_every_documented_event_exists() -> None:
    documented = set(_headings(4))
    assert set(ev.EVENTS) <= documented, _missing(set(ev.EVENTS), documented, "undocumented events")
    assert documented <= set(ev.EVENTS), _missing(
        documented, set(ev.EVENTS), "documented, no event"
    )
    assert len(_headings(4)) == len(documented), "an event is documented twice"


def test_the_source_scan_finds_codes_of_every_kind() -> None:
    # Guards the scan itself: if a constructor is renamed, the scan must not silently go blind.
    codes = _codes_in_source()
    for code in ("stale_turn", "invalid_faces", "hello_required", "forbidden", "store_full"):
        assert code in codes, f"the scan no longer finds {code!r}"
    for code in ("slow_consumer", "malformed_msgpack", "message_too_large", "nested_too_deeply"):
        assert code in codes, f"the scan no longer finds {code!r}"


def test_every_error_code_in_the_source_is_documented() -> None:
    codes = _codes_in_source()
    documented = set(_first_column(DOC, "Code"))
    missing = {code: sorted(files) for code, files in codes.items() if code not in documented}
    assert not missing, f"error codes missing from protocol.md (code: files): {missing}"


def test_every_documented_error_code_exists_in_the_source() -> None:
    codes = _codes_in_source()
    # A code may sit in two tables (forbidden: the session's and the rules'), never stray.
    stray = sorted(set(_first_column(DOC, "Code")) - set(codes))
    assert not stray, f"protocol.md documents codes the source never produces: {stray}"


def test_rule_errors_named_per_command_are_documented_codes() -> None:
    documented = set(_first_column(DOC, "Code"))
    for name in cmd.COMMANDS:
        line = re.search(r"^Rule errors: (.*)$", _section(f"### `{name}`"), re.M)
        assert line, f"{name}: no 'Rule errors:' line"
        named = set(re.findall(r"`([a-z_]+)`", line.group(1)))
        assert named <= documented, _missing(named, documented, f"{name} names unknown codes")


# Each method as the method table declares it ------------------------------------------------------


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_says_who_may_call_it_as_the_method_table_does(name: str) -> None:
    section = " ".join(_section(f"### `{name}`").split())
    who = WHO_TEXT[METHODS[name].who]
    # "narrator" must not match the start of "narrator; a player for its own combatant".
    assert re.search(rf"Who: {re.escape(who)}[.:( ]", section), f"{name}: not 'Who: {who}'"


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_documents_exactly_its_params_and_which_are_required(name: str) -> None:
    method = METHODS[name]
    header = "Field" if method.kind == "command" else "Param"
    rows = [row for table in _tables(_section(f"### `{name}`"), header) for row in table]
    assert [row[0] for row in rows] == [f"`{p.name}`" for p in method.params]
    for row, param in zip(rows, method.params, strict=True):
        assert row[2].startswith("yes") == param.required, f"{name}.{param.name}: {row[2]!r}"


def test_the_command_envelope_is_the_method_tables() -> None:
    rows = _tables(_section("## Command methods"), "Param")[0]
    assert [row[0] for row in rows] == [f"`{p.name}`" for p in COMMAND_ENVELOPE]


# Field tables ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(cmd.COMMANDS))
def test_each_command_documents_exactly_its_fields(name: str) -> None:
    assert _field_names(f"### `{name}`") == _fields(cmd.COMMANDS[name])


@pytest.mark.parametrize("name", sorted(ev.EVENTS))
def test_each_event_documents_exactly_its_fields(name: str) -> None:
    assert _field_names(f"#### `{name}`") == _fields(ev.EVENTS[name])


def test_no_event_field_takes_a_key_of_the_event_envelope() -> None:
    clashes = {n: RESERVED_EVENT_KEYS & set(_fields(c)) for n, c in ev.EVENTS.items()}
    assert not {n: c for n, c in clashes.items() if c}, "event fields shadow combat/seq/event"


def test_each_documented_type_lists_exactly_its_fields() -> None:
    documented = re.findall(r"^### `([A-Z][A-Za-z]+)`$", DOC, flags=re.M)
    assert len(documented) > 10, "type sections not found"
    for name in documented:
        cls = getattr(model, name, None) or getattr(views, name)
        assert _field_names(f"### `{name}`") == _fields(cls), name


def test_every_type_a_field_table_links_to_is_documented() -> None:
    linked = set(re.findall(r"\[`([A-Z][A-Za-z]+)`\]\(#[a-z]+\)", DOC))
    documented = set(re.findall(r"^### `([A-Z][A-Za-z]+)`$", DOC, flags=re.M))
    assert linked <= documented, _missing(linked, documented, "linked types without a section")


def test_documented_limits_are_the_code_constants() -> None:
    rows = [row for table in _tables(DOC, "Constant") for row in table]
    assert len(rows) > 20
    for row in rows:
        module, _, name = row[0].strip("`").partition(".")
        actual = getattr(importlib.import_module(LIMIT_MODULES[module]), name)
        assert ast.literal_eval(row[1]) == actual, f"{row[0]} is {actual!r}, not {row[1]}"


# Byte-level examples --------------------------------------------------------------------------

EXAMPLE = re.compile(r"```hex\n(.*?)\n```\s*```json\n(.*?)\n```", re.S)
PREFIX = re.compile(r"```hex-prefix\n(.*?)\n```", re.S)


def _as_array(message: wire.Message) -> list[Any]:
    """The message in the page's JSON form."""
    if isinstance(message, wire.Request):
        return [0, message.msgid, message.method, [message.params] if message.params else []]
    if isinstance(message, wire.Response):
        error = None if message.error is None else dataclasses.asdict(message.error)
        return [1, message.msgid, error, message.result]
    return [2, message.method, [message.params] if message.params else []]


def _examples() -> list[tuple[bytes, Any]]:
    return [(bytes.fromhex(h), json.loads(j)) for h, j in EXAMPLE.findall(DOC)]


def test_hex_examples_decode_to_what_the_page_says() -> None:
    examples = _examples()
    assert len(examples) >= 8
    for data, expected in examples:
        decoded = wire.Decoder().feed(data)
        assert len(decoded) == 1, f"{data.hex(' ')} is not exactly one message: {decoded}"
        (message,) = decoded
        assert not isinstance(message, wire.WireError), message
        assert _as_array(message) == expected
        assert wire.pack(message) == data, "the example is not the canonical encoding"


def test_hex_prefixes_are_incomplete_messages() -> None:
    prefixes = PREFIX.findall(DOC)
    assert prefixes
    for prefix in prefixes:
        assert wire.Decoder().feed(bytes.fromhex(prefix)) == []


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the daemon closed the connection"
        data += chunk
    return data


def _message(sock: socket.socket, decoder: wire.Decoder, first: bytes = b"") -> Any:
    items = decoder.feed(first)
    while not items:
        items = decoder.feed(_read(sock, 1))
    assert len(items) == 1, items
    return items[0]


def test_a_real_daemon_sends_the_documented_bytes(tmp_path: Path) -> None:
    # A bare socket, not a client library: these are the bytes any client sees.
    requests = {m[1]: data for data, m in _examples() if m[0] == 0}
    responses = {m[1]: data for data, m in _examples() if m[0] == 1}
    notifications = {m[1]: data for data, m in _examples() if m[0] == 2}
    (prefix,) = PREFIX.findall(DOC)
    start = bytes.fromhex(prefix)
    with running(tmp_path) as d, socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        sock.connect(str(d.socket))
        decoder = wire.Decoder()

        sock.sendall(requests[1])
        assert _read(sock, len(start)) == start
        hello = _message(sock, decoder, start)
        assert list(hello.result) == _first_column(_section("### `hello`"), "Key")
        assert hello.result["session"]["role"] == "narrator"

        sock.sendall(requests[2])
        assert _message(sock, decoder).error is None
        sock.sendall(requests[3])
        assert _read(sock, len(responses[3])) == responses[3]

        sock.sendall(b"\xc1")
        assert _read(sock, len(notifications["error"])) == notifications["error"]
        assert sock.recv(1) == b"", "the connection stays open after a fatal error"
