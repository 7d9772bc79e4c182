"""Bad input against a real daemon: every refusal is data (a stable code and field), a refused
request changes nothing, a stream that cannot be trusted is closed after a final error, idle
and slow peers cannot starve the others, and nothing a client sends brings the daemon down.
The tests of what one connection sends run on the Unix socket and again over WebSocket."""

from __future__ import annotations

import contextlib
import fcntl
import json
import socket
import struct
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import BytesMessage, TextMessage
from wsproto.events import Request as WsRequest

from daemon import CallError, Client, Daemon, running
from turnkeeper.methods import MAX_HISTORY_PAGE, MAX_ID_CHARS
from turnkeeper.transport.channel import OUTBOX_MESSAGES, WRITE_STALL
from turnkeeper.transport.session import HELLO_TIMEOUT
from turnkeeper_sdk import wire

CALM = "calm"
"""The module's bystander combat: no test may change it, and every refusal is checked on it."""
PROMPT = 2.0
"""Seconds a plain call may take on a busy 2-core machine and still count as answered promptly."""
RSS_LIMIT_KB = 300 * 1024
"""Generous: the daemon idles near 40 MiB; a slow consumer must not make it grow unbounded."""


SECRETS: dict[str, str] = {}
"""The narrator token WebSocket sessions say hello with, per daemon data directory."""
STREAM_ONLY = pytest.mark.parametrize("transport", ["unix"], indirect=True)
"""For tests of a byte stream's own framing (several messages in one write) or of the outbox,
which is the same code whatever carries it."""


def _log_faults(d: Daemon, start: int = 0) -> list[str]:
    """The lines of the daemon's log, from byte ``start``, that show it failed: a traceback, an
    error-level line, anything that is not one of its JSON lines."""
    data = d.log.read_bytes()
    # From the start of the line ``start`` falls in (it may have been half written then), to the
    # end of the last whole line: a line still being written is read by the next check.
    begin = data.rfind(b"\n", 0, start) + 1
    complete = data[begin : data.rfind(b"\n") + 1].decode(errors="replace")
    return [line for line in complete.splitlines() if _is_fault(line)]


def _is_fault(line: str) -> bool:
    if "Traceback" in line or not line.startswith("{"):
        return True
    return bool(json.loads(line)["level"] in ("error", "critical"))


@contextlib.contextmanager
def _clean(d: Daemon) -> Iterator[Daemon]:
    """``d`` for the block; then the daemon is stopped, so its log is complete, and the log must
    show no failure, whatever the block did and in whatever order the tests ran."""
    yield d
    assert d.stop() == 0
    assert _log_faults(d) == []


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("hostile"), ws=True) as started, _clean(started) as d:
        SECRETS[str(d.data_dir)] = d.token("narrator")
        gm = d.client()
        gm.call("create_combat", request_id="calm-1", combat_id=CALM, ruleset="marvel")
        for cid, faces in (("ann", [6, 6, 5]), ("bob", [4, 4, 4])):
            gm.call(
                "add_combatant", request_id=f"calm-{cid}", combat=CALM, id=cid, display_name=cid
            )
            gm.call(
                "roll_initiative",
                request_id=f"calm-r-{cid}",
                combat=CALM,
                combatant=cid,
                faces=faces,
            )
        gm.call("start_combat", request_id="calm-start", combat=CALM)
        gm.close()
        yield d


@pytest.fixture(params=["unix", "ws"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gm(daemon: Daemon, transport: str) -> Iterator[Client]:
    c = _raw(daemon, transport)
    _hello(c, daemon, transport)
    yield c
    c.close()


def _calm(d: Daemon) -> tuple[int, Any]:
    with d.client() as c:
        answer = c.call("get_combat", combat=CALM)
    return answer["seq"], answer["view"]


@pytest.fixture(autouse=True)
def log_stays_clean(daemon: Daemon) -> Iterator[None]:
    """Each test's own part of the module daemon's log shows no failure (anything written late
    is caught by the next test, or when the daemon stops)."""
    start = daemon.log.stat().st_size
    yield
    assert _log_faults(daemon, start) == []


@pytest.fixture(autouse=True)
def calm_is_untouched(daemon: Daemon) -> Iterator[None]:
    """Whatever a test throws at the daemon, the bystander combat is exactly as it was and the
    daemon is still running."""
    before = _calm(daemon)
    yield
    assert daemon.process is not None
    assert daemon.process.poll() is None, "the daemon died"
    assert _calm(daemon) == before


def _turn(c: Client, combat: str = CALM) -> dict[str, Any]:
    turn = c.call("get_combat", combat=combat)["view"]["turn"]
    return {"round": turn["round"], "combatant": turn["combatant"]}


def _raw(d: Daemon, transport: str) -> Client:
    """A connection that has not said hello."""
    if transport == "ws":
        assert d.ws_port is not None
        return Client.ws(d.ws_port)
    return Client.unix(d.socket)


def _hello(c: Client, d: Daemon, transport: str) -> None:
    """A narrator's hello: the Unix peer's own uid, a token over WebSocket."""
    c.hello(SECRETS[str(d.data_dir)] if transport == "ws" else None)


def _until_closed(c: Client, timeout: float) -> list[wire.Notification]:
    """Every notification up to the daemon closing the connection (EOF or reset)."""
    c.sock.settimeout(timeout)
    seen: list[wire.Notification] = []
    try:
        while True:
            seen.append(c.notification())
    except (EOFError, ConnectionResetError):
        return seen


def _still_serving(d: Daemon) -> None:
    with d.client() as c:
        started = time.monotonic()
        assert c.call("list_combats")
        assert time.monotonic() - started < PROMPT


def _send(c: Client, data: bytes) -> None:
    # The daemon may close while a large write is still going: that is the point.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        c.send_raw(data)


# ------------------------------------------------------------------------ fatal stream errors


def test_oversize_frame_gets_message_too_large_and_is_closed(daemon: Daemon, gm: Client) -> None:
    # Every value is under its own limit; the message as a whole is over MAX_MESSAGE_BYTES.
    chunk = "x" * (wire.MAX_STRING_BYTES - 16)
    count = wire.MAX_MESSAGE_BYTES // len(chunk) + 2
    frame = msgpack.packb(
        [0, 1, "end_turn", [{"combat": CALM, "request_id": "big", "pad": [chunk] * count}]]
    )
    assert len(frame) > wire.MAX_MESSAGE_BYTES
    _send(gm, frame)
    (final,) = _until_closed(gm, 10.0)
    assert final.method == wire.ERROR_NOTIFICATION
    assert (final.params["code"], final.params["fatal"]) == ("message_too_large", True)
    _still_serving(daemon)


def test_oversize_frame_before_hello_is_refused_the_same_way(
    daemon: Daemon, transport: str
) -> None:
    c = _raw(daemon, transport)
    size = wire.MAX_MESSAGE_BYTES + 10
    _send(c, b"\xdb" + size.to_bytes(4, "big") + b"a" * size)
    (final,) = _until_closed(c, 10.0)
    assert final.params["code"] == "message_too_large"
    _still_serving(daemon)


def test_malformed_msgpack_gets_malformed_msgpack_and_is_closed(daemon: Daemon, gm: Client) -> None:
    _send(gm, b"\xc1")
    (final,) = _until_closed(gm, 10.0)
    assert final.method == wire.ERROR_NOTIFICATION
    assert (final.params["code"], final.params["fatal"]) == ("malformed_msgpack", True)
    _still_serving(daemon)


def test_an_integer_map_key_is_fatal(daemon: Daemon, gm: Client) -> None:
    _send(gm, msgpack.packb([0, 9, "get_combat", [{1: CALM}]]))
    (final,) = _until_closed(gm, 10.0)
    assert final.params["code"] == "malformed_msgpack"


# -------------------------------------------------------------------- wrong message shapes

_DEEP: Any = CALM
for _ in range(wire.MAX_NESTING + 4):
    _DEEP = [_DEEP]

# (raw message, msgid it is answered under or None for an error notification, code, field)
SHAPES: dict[str, tuple[Any, int | None, str, str]] = {
    "not_an_array": ({"method": "end_turn"}, None, "invalid_message", ""),
    "a_scalar": (7, None, "invalid_message", ""),
    "empty_array": ([], None, "invalid_message", "type"),
    "unknown_type": ([3, 41, "list_combats", []], None, "invalid_message", "type"),
    "type_true": ([True, 41, "list_combats", []], None, "invalid_message", "type"),
    "request_too_short": ([0, 41, "list_combats"], 41, "invalid_message", ""),
    "request_too_long": ([0, 42, "list_combats", [], None], 42, "invalid_message", ""),
    "msgid_negative": ([0, -1, "list_combats", []], None, "invalid_message", "msgid"),
    "msgid_too_big": (
        [0, wire.MAX_MSGID + 1, "list_combats", []],
        None,
        "invalid_message",
        "msgid",
    ),
    "msgid_a_string": ([0, "43", "list_combats", []], None, "invalid_message", "msgid"),
    "msgid_true": ([0, True, "list_combats", []], None, "invalid_message", "msgid"),
    "msgid_float": ([0, 43.0, "list_combats", []], None, "invalid_message", "msgid"),
    "method_not_a_string": ([0, 44, 7, []], 44, "invalid_message", "method"),
    "params_a_map": ([0, 45, "end_turn", {"combat": CALM}], 45, "invalid_message", "params"),
    "params_not_a_map": ([0, 46, "end_turn", [CALM]], 46, "invalid_message", "params"),
    "params_two_maps": ([0, 47, "end_turn", [{}, {}]], 47, "invalid_message", "params"),
    "params_nil": ([0, 48, "end_turn", None], 48, "invalid_message", "params"),
    "bin_value": (
        [0, 49, "get_combat", [{"combat": CALM.encode()}]],
        49,
        "invalid_message",
        "params.combat",
    ),
    "ext_value": (
        [0, 50, "get_combat", [{"combat": msgpack.ExtType(1, b"x")}]],
        50,
        "invalid_message",
        "params.combat",
    ),
    "nested_too_deeply": ([0, 51, "get_combat", [{"combat": _DEEP}]], 51, "nested_too_deeply", ""),
    "a_response_from_a_client": ([1, 52, None, None], None, "invalid_message", ""),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_wrong_message_shape_is_answered_and_the_connection_stays_open(
    daemon: Daemon, gm: Client, shape: str
) -> None:
    message, msgid, code, field = SHAPES[shape]
    gm.send_raw(msgpack.packb(message))
    if msgid is None:
        note = gm.notification()
        assert note.method == wire.ERROR_NOTIFICATION
        assert (note.params["code"], note.params["fatal"]) == (code, False)
        if field:
            assert note.params["field"] == field
    else:
        answer = gm.response(msgid)
        assert answer.error is not None
        assert answer.error.code == code
        if field:
            assert answer.error.field.startswith(field)
    # The same connection goes on as if nothing happened.
    assert gm.call("get_combat", combat=CALM)["combat"] == CALM
    assert gm.notes == []


def test_a_notification_from_a_client_is_ignored(gm: Client) -> None:
    gm.send_raw(msgpack.packb([2, "end_turn", [{"combat": CALM, "turn": _turn(gm)}]]))
    assert gm.call("list_combats")
    assert gm.notes == []


@STREAM_ONLY
def test_many_bad_messages_in_one_write_are_each_answered_in_order(gm: Client) -> None:
    bad = b"".join(msgpack.packb([0, 60 + i, "no_such_method", []]) for i in range(50))
    gm.send_raw(bad + msgpack.packb(7) + msgpack.packb([0, 200, "list_combats", []]))
    for i in range(50):
        answer = gm.response(60 + i)
        assert answer.error is not None
        assert answer.error.code == "unknown_method"
    assert gm.response(200).error is None
    (note,) = gm.notes
    assert note.params["code"] == "invalid_message"


@STREAM_ONLY
def test_reads_mixed_with_other_requests_and_cut_anywhere_are_each_answered_in_order(
    gm: Client,
) -> None:
    # A read found in memory is answered as its bytes arrive, anything else by the session's
    # task: in a stream of both, cut mid-message, every request is answered, in order.
    requests: list[list[Any]] = [[0, 400 + i, "get_combat", [{"combat": CALM}]] for i in range(30)]
    requests[10] = [0, 410, "list_combats", []]
    requests[20] = [0, 420, "get_combat", [{"combat": "no-such-combat"}]]
    data = b"".join(msgpack.packb(r) for r in requests)
    for start in range(0, len(data), 97):
        gm.send_raw(data[start : start + 97])
    # An answer out of order would be skipped by ``response`` and its own wait never end.
    answers = [gm.response(400 + i) for i in range(30)]
    assert answers[20].error is not None
    assert answers[20].error.field == "combat"
    assert answers[10].error is None
    assert CALM in [row["combat"] for row in answers[10].result]
    for i, answer in enumerate(answers):
        if i not in (10, 20):
            assert answer.error is None
            assert answer.result["combat"] == CALM


# ------------------------------------------------------------------------- refused requests


@pytest.mark.parametrize("method", ["no_such_method", "", "HELLO", "_apply", "tick "])
def test_unknown_method(gm: Client, method: str) -> None:
    with pytest.raises(CallError) as refused:
        gm.call(method, combat=CALM, request_id="unknown")
    assert (refused.value.code, refused.value.field) == ("unknown_method", "method")


_TURN = {"round": 1, "combatant": "ann"}
_LONG = "x" * (MAX_ID_CHARS + 1)

# (method, params, field): every one is refused with invalid_params naming the field.
BAD_PARAMS: dict[str, tuple[str, dict[str, Any], str]] = {
    "history_after_negative": ("history", {"combat": CALM, "after": -1}, "after"),
    "history_after_string": ("history", {"combat": CALM, "after": "1"}, "after"),
    "history_after_bool": ("history", {"combat": CALM, "after": True}, "after"),
    "history_after_float": ("history", {"combat": CALM, "after": 1.0}, "after"),
    "history_after_huge": ("history", {"combat": CALM, "after": 2**60}, "after"),
    "history_limit_zero": ("history", {"combat": CALM, "limit": 0}, "limit"),
    "history_limit_over_page": (
        "history",
        {"combat": CALM, "limit": MAX_HISTORY_PAGE + 1},
        "limit",
    ),
    "subscribe_after_negative": ("subscribe", {"combat": CALM, "after": -5}, "after"),
    "get_combat_without_combat": ("get_combat", {}, "combat"),
    "get_combat_combat_int": ("get_combat", {"combat": 7}, "combat"),
    "get_combat_combat_empty": ("get_combat", {"combat": ""}, "combat"),
    "get_combat_combat_too_long": ("get_combat", {"combat": _LONG}, "combat"),
    "get_combat_combat_a_list": ("get_combat", {"combat": [CALM]}, "combat"),
    "command_without_request_id": ("end_turn", {"combat": CALM, "turn": _TURN}, "request_id"),
    "command_request_id_int": (
        "end_turn",
        {"combat": CALM, "request_id": 5, "turn": _TURN},
        "request_id",
    ),
    "command_request_id_too_long": (
        "end_turn",
        {"combat": CALM, "request_id": _LONG, "turn": _TURN},
        "request_id",
    ),
    "command_without_combat": ("end_turn", {"request_id": "bad", "turn": _TURN}, "combat"),
    "command_as_not_a_string": (
        "end_turn",
        {"combat": CALM, "request_id": "bad", "turn": _TURN, "as": 5},
        "as",
    ),
    "command_unknown_field": (
        "end_turn",
        {"combat": CALM, "request_id": "bad", "turn": _TURN, "bogus": 1},
        "bogus",
    ),
    "command_missing_field": ("end_turn", {"combat": CALM, "request_id": "bad"}, "turn"),
    "turn_round_a_string": (
        "end_turn",
        {"combat": CALM, "request_id": "bad", "turn": {"round": "one", "combatant": "ann"}},
        "turn.round",
    ),
    "turn_not_a_map": ("end_turn", {"combat": CALM, "request_id": "bad", "turn": [1]}, "turn"),
    "init_mod_a_string": (
        "add_combatant",
        {"combat": CALM, "request_id": "bad", "id": "z", "display_name": "Z", "init_mod": "high"},
        "init_mod",
    ),
    "init_mod_a_float": (
        "add_combatant",
        {"combat": CALM, "request_id": "bad", "id": "z", "display_name": "Z", "init_mod": 1.5},
        "init_mod",
    ),
    "hidden_a_string": (
        "add_combatant",
        {"combat": CALM, "request_id": "bad", "id": "z", "display_name": "Z", "hidden": "yes"},
        "hidden",
    ),
    "tags_a_string": (
        "add_combatant",
        {"combat": CALM, "request_id": "bad", "id": "z", "display_name": "Z", "tags": "brute"},
        "tags",
    ),
    "faces_of_strings": (
        "roll_initiative",
        {"combat": CALM, "request_id": "bad", "combatant": "ann", "faces": ["6", "6", "6"]},
        "faces[0]",
    ),
    "when_not_before_or_after": (
        "take_held_turn",
        {"combat": CALM, "request_id": "bad", "combatant": "ann", "when": "during", "other": "b"},
        "when",
    ),
    "targets_a_string": (
        "declare_action",
        {
            "combat": CALM,
            "request_id": "bad",
            "turn": _TURN,
            "action": {"kind": "attack", "targets": "bob"},
        },
        "action.targets",
    ),
    "option_without_value": (
        "create_combat",
        {
            "request_id": "bad",
            "combat_id": "bad-options",
            "ruleset": "marvel",
            "options": [["turn_time_limit"]],
        },
        "options[0]",
    ),
    "combat_id_too_long": (
        "create_combat",
        {"request_id": "bad", "combat_id": _LONG, "ruleset": "marvel"},
        "combat_id",
    ),
    # NUL fits no store's key (PostgreSQL's text cannot hold it): refused on every store.
    "combat_id_with_nul": (
        "create_combat",
        {"request_id": "bad", "combat_id": "bad\x00", "ruleset": "marvel"},
        "combat_id",
    ),
    "request_id_with_nul": (
        "create_combat",
        {"request_id": "bad\x00", "combat_id": "bad-options", "ruleset": "marvel"},
        "request_id",
    ),
    "combat_with_nul": ("get_combat", {"combat": f"{CALM}\x00"}, "combat"),
}


@pytest.mark.parametrize("case", list(BAD_PARAMS))
def test_wrong_param_types_and_ranges_are_invalid_params_with_the_field(
    gm: Client, case: str
) -> None:
    method, params, field = BAD_PARAMS[case]
    # Sent as written: the SDK's call would fill in a missing request_id.
    gm.send_raw(wire.pack(wire.Request(7, method, params)))
    error = gm.response(7).error
    assert error is not None
    assert (error.code, error.field) == ("invalid_params", field)
    assert CALM in {row["combat"] for row in gm.call("list_combats")}
    assert "bad-options" not in {row["combat"] for row in gm.call("list_combats")}


def test_subscribe_after_beyond_the_log_is_invalid_params_like_history(gm: Client) -> None:
    # history's range checks say invalid_params; a subscription past the end of the log is the
    # same mistake and should read the same.
    seq = gm.call("get_combat", combat=CALM)["seq"]
    with pytest.raises(CallError) as refused:
        gm.call("subscribe", combat=CALM, after=seq + 1)
    assert (refused.value.code, refused.value.field) == ("invalid_params", "after")


@pytest.mark.parametrize(
    ("method", "params", "code", "field"),
    [
        ("end_turn", {"turn": {"round": 1, "combatant": "bob"}}, "stale_turn", "turn"),
        ("end_turn", {"turn": {"round": 99, "combatant": "ann"}}, "stale_turn", "turn"),
        ("start_combat", {}, "wrong_phase", ""),
        ("roll_initiative", {"combatant": "ann", "faces": [7, 7, 7]}, "wrong_phase", ""),
        ("add_combatant", {"id": "ann", "display_name": "Ann"}, "duplicate_combatant", "id"),
        ("defeat_combatant", {"combatant": "nobody"}, "unknown_combatant", "combatant"),
        ("close_window", {"window": "w999"}, "unknown_window", "window"),
        (
            "apply_condition",
            {"target": "ann", "type": "custom", "rounds": 0},
            "invalid_value",
            "rounds",
        ),
    ],
)
def test_rule_refusals_change_nothing(
    gm: Client, method: str, params: dict[str, Any], code: str, field: str
) -> None:
    with pytest.raises(CallError) as refused:
        gm.call(method, combat=CALM, request_id=f"rule-{method}-{code}-{params}", **params)
    assert refused.value.code == code
    if field:
        assert refused.value.field == field


def test_unknown_combat_is_refused(gm: Client) -> None:
    for method, params in [
        ("get_combat", {}),
        ("history", {}),
        ("subscribe", {}),
        ("end_turn", {"request_id": "nowhere", "turn": _TURN}),
    ]:
        with pytest.raises(CallError) as refused:
            gm.call(method, combat="nowhere", **params)
        assert (refused.value.code, refused.value.field) == ("unknown_combat", "combat")


# -------------------------------------------------------------------------------- hello


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("end_turn", {"combat": CALM, "request_id": "early", "turn": _TURN}),
        ("end_combat", {"combat": CALM, "request_id": "early"}),
        ("get_combat", {"combat": CALM}),
        ("subscribe", {"combat": CALM}),
        ("list_combats", {}),
    ],
)
def test_anything_before_hello_is_hello_required(
    daemon: Daemon, transport: str, method: str, params: dict[str, Any]
) -> None:
    with _raw(daemon, transport) as c:
        with pytest.raises(CallError) as refused:
            c.call(method, **params)
        assert (refused.value.code, refused.value.field) == ("hello_required", "method")
        # The refusal is not the end: hello then works on the same connection.
        _hello(c, daemon, transport)
        assert c.call("get_combat", combat=CALM)["combat"] == CALM


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"protocol": 0}, "unsupported_protocol", "protocol"),
        ({"protocol": "1"}, "unsupported_protocol", "protocol"),
        ({}, "unsupported_protocol", "protocol"),
        ({"protocol": 1, "token": 5}, "invalid_params", "token"),
        ({"protocol": 1, "token": "made-up"}, "unauthenticated", "token"),
    ],
)
def test_a_bad_hello_is_refused_and_leaves_the_connection_unauthenticated(
    daemon: Daemon, transport: str, params: dict[str, Any], code: str, field: str
) -> None:
    with _raw(daemon, transport) as c:
        with pytest.raises(CallError) as refused:
            c.call("hello", **params)
        assert (refused.value.code, refused.value.field) == (code, field)
        with pytest.raises(CallError) as refused:
            c.call("list_combats")
        assert refused.value.code == "hello_required"


# ---------------------------------------------------------------------------- idle and slow

IDLE_CONNECTIONS = 200


def test_idle_connections_do_not_block_others_and_are_closed_after_the_hello_timeout(
    daemon: Daemon,
) -> None:
    idle: list[socket.socket] = []
    try:
        opened = time.monotonic()
        for i in range(IDLE_CONNECTIONS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(daemon.socket))
            if i % 2:
                s.sendall(b"\x94\x00")  # half a request, never finished
            idle.append(s)
        with daemon.client() as c:
            for _ in range(20):
                started = time.monotonic()
                assert c.call("get_combat", combat=CALM)["combat"] == CALM
                assert time.monotonic() - started < PROMPT
            # Every idle one is told why and closed once HELLO_TIMEOUT has passed.
            deadline = opened + HELLO_TIMEOUT + 15.0
            for s in idle:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                (final,) = wire.Decoder().feed(data)
                assert isinstance(final, wire.Notification)
                assert final.params["code"] == "hello_timeout"
            assert time.monotonic() - opened >= HELLO_TIMEOUT - 0.5
            # A session that said hello in time is not subject to the hello timeout.
            assert c.call("get_combat", combat=CALM)["combat"] == CALM
    finally:
        for s in idle:
            s.close()


def _rss_kb(d: Daemon) -> int:
    assert d.process is not None
    for line in Path(f"/proc/{d.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _flood(gm: Client, combat: str, turns: int) -> float:
    """End ``turns`` turns in a row (about four events each); returns the slowest call."""
    slowest = 0.0
    for i in range(turns):
        turn = _turn(gm, combat)
        started = time.monotonic()
        gm.call("end_turn", combat=combat, request_id=f"{combat}-{i}", turn=turn)
        slowest = max(slowest, time.monotonic() - started)
    return slowest


FLOOD_TURNS = 1000
"""About 4000 events: far more than OUTBOX_MESSAGES plus what the kernel buffers."""


def _slow_subscriber(daemon: Daemon, gm: Client, combat: str) -> tuple[Client, str]:
    gm.call("create_combat", request_id=f"{combat}-c", combat_id=combat, ruleset="marvel")
    for cid in ("ann", "bob"):
        gm.call(
            "add_combatant", request_id=f"{combat}-{cid}", combat=combat, id=cid, display_name=cid
        )
    gm.call("start_combat", request_id=f"{combat}-s", combat=combat)
    slow = Client.unix(daemon.socket)
    connection = slow.hello()["session"]["connection"]
    slow.call("subscribe", combat=combat, after=0)
    return slow, str(connection)


def _disconnected(daemon: Daemon, connection: str) -> str | None:
    for line in daemon.log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == "disconnected" and entry.get("connection") == connection:
                return str(entry.get("reason"))
    return None


@STREAM_ONLY
def test_a_slow_consumer_neither_holds_up_others_nor_grows_the_daemon(
    daemon: Daemon, gm: Client
) -> None:
    slow, _ = _slow_subscriber(daemon, gm, "slow-memory")
    try:
        assert OUTBOX_MESSAGES * 2 < FLOOD_TURNS * 4
        slowest = _flood(gm, "slow-memory", FLOOD_TURNS)
        assert slowest < PROMPT
        _still_serving(daemon)
        assert _rss_kb(daemon) < RSS_LIMIT_KB
    finally:
        slow.close()


@STREAM_ONLY
def test_a_slow_consumer_that_never_reads_is_disconnected(daemon: Daemon, gm: Client) -> None:
    slow, connection = _slow_subscriber(daemon, gm, "slow-cut")
    try:
        _flood(gm, "slow-cut", FLOOD_TURNS)
        # Once it has been found too slow, nothing more is worth sending it: the connection is
        # closed without waiting for a peer that may never read again.
        deadline = time.monotonic() + 3 * WRITE_STALL
        while _disconnected(daemon, connection) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _disconnected(daemon, connection) == "slow_consumer"
    finally:
        slow.close()


def _flood_until_cut(gm: Client, slow: Client, combat: str) -> None:
    """End turns until the daemon has found ``slow`` too slow, and no further: from the moment
    its buffer for ``slow`` filled, the daemon waits WRITE_STALL for it to read, then drops
    what is buffered, final error included, so a flood going on for longer (a loaded machine)
    would lose what is checked. A connection being closed is read no more: a small request
    ``slow`` sends before each turn and still finds unread after it says so. The next turn is
    read from the events of the last, so each turn costs one call: the outbox fills as fast
    as the daemon commits."""
    turn = _turn(gm, combat)
    for i in range(FLOOD_TURNS):
        _send(slow, wire.pack(wire.Request(i, "list_plugins")))
        ended = gm.call("end_turn", combat=combat, request_id=f"{combat}-{i}", turn=turn)
        (started,) = [e for e in ended["events"] if e["event"] == "turn_started"]
        turn = {"round": started["round"], "combatant": started["combatant"]}
        unread = fcntl.ioctl(slow.sock, termios.TIOCOUTQ, struct.pack("i", 0))
        if struct.unpack("i", unread)[0]:
            return
    pytest.fail(f"still read after {FLOOD_TURNS} turns: never found too slow")


@STREAM_ONLY
def test_a_slow_consumer_is_told_slow_consumer_before_the_close(daemon: Daemon, gm: Client) -> None:
    slow, _ = _slow_subscriber(daemon, gm, "slow-told")
    try:
        _flood_until_cut(gm, slow, "slow-told")
        seen = _until_closed(slow, 10.0)
        events = [n.params["seq"] for n in seen if n.method == "event"]
        assert events == list(range(events[0], events[0] + len(events)))  # no gap, in order
        assert seen[-1].method == wire.ERROR_NOTIFICATION
        assert (seen[-1].params["code"], seen[-1].params["fatal"]) == ("slow_consumer", True)
    finally:
        slow.close()


# ------------------------------------------------------------------ nothing brings it down


def _with_player(d: Daemon) -> tuple[Client, Client, str]:
    """A narrator, a u1 player session on the Unix socket, and a combat on ann's (u1's) turn."""
    gm = d.client()
    gm.call("create_combat", request_id="c", combat_id="x", ruleset="marvel")
    gm.call(
        "add_combatant",
        request_id="a",
        combat="x",
        id="ann",
        display_name="Ann",
        controller="u1",
        player_character=True,
    )
    gm.call("add_combatant", request_id="b", combat="x", id="ogre", display_name="Ogre")
    gm.call("roll_initiative", request_id="ra", combat="x", combatant="ann", faces=[6, 6, 5])
    gm.call("roll_initiative", request_id="ro", combat="x", combatant="ogre", faces=[2, 2, 2])
    gm.call("start_combat", request_id="s", combat="x")
    player = Client.unix(d.socket)
    player.hello(d.token("player", "--user", "u1"))
    return gm, player, "x"


def _alive(d: Daemon) -> bool:
    assert d.process is not None
    return d.process.poll() is None


def test_an_answer_too_large_to_send_does_not_bring_the_daemon_down(tmp_path: Path) -> None:
    # The request fits the wire; the events it makes echo the tags twice (declared, resolved),
    # so the answer, the history page and a subscriber's catch-up would not.
    tags = [f"{i:04d}" + "t" * 1990 for i in range(300)]
    with running(tmp_path) as started, _clean(started) as d:
        gm, player, combat = _with_player(d)
        seq = gm.call("get_combat", combat=combat)["seq"]
        action = {"kind": "move", "tags": tags}
        steps = [
            (
                player,
                "declare_action",
                {"request_id": "huge", "turn": _turn(gm, combat), "action": action},
            ),
            (gm, "get_combat", {}),
            (gm, "history", {"after": seq}),
            (gm, "subscribe", {"after": seq}),
        ]
        for client, method, params in steps:
            try:
                client.call(method, combat=combat, **params)
            except CallError:
                pass  # a refusal is fine; the daemon going away is not
            except (OSError, EOFError) as lost:
                pytest.fail(
                    f"{method}: the connection was lost ({lost!r}); daemon alive: {_alive(d)}"
                )
            assert _alive(d), f"the daemon died on {method}"
        _still_serving(d)


def test_an_integer_too_large_to_store_is_refused_not_fatal(tmp_path: Path) -> None:
    with running(tmp_path) as started, _clean(started) as d:
        gm = d.client()
        gm.call("create_combat", request_id="c", combat_id="x", ruleset="marvel")
        seq = gm.call("get_combat", combat="x")["seq"]
        with pytest.raises(CallError) as refused:
            # A total of 18 + (2**64 - 1) fits no msgpack integer.
            gm.call(
                "add_combatant",
                request_id="big",
                combat="x",
                id="big",
                display_name="Big",
                init_mod=2**64 - 1,
                faces=[6, 6, 6],
            )
        assert (refused.value.code, refused.value.field) == ("invalid_value", "init_mod")
        assert _alive(d), "the daemon died"
        with d.client() as c:
            assert c.call("get_combat", combat="x")["seq"] == seq


# ------------------------------------------------------------------- WebSocket's own framing


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(msgpack.packb([0, 70, "list_combats", []]) * 2, id="two_messages"),
        pytest.param(msgpack.packb([0, 71, "list_combats", []])[:-1], id="half_a_message"),
        pytest.param(msgpack.packb([0, 72, "list_combats", []]) + b"\x94", id="one_and_a_bit"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_websocket_frame_must_hold_exactly_one_message(gm: Client, frame: bytes) -> None:
    # The frame keeps the connection in step, so a bad one is refused and the session goes on.
    gm.send_raw(frame)
    note = gm.notification()
    assert (note.params["code"], note.params["fatal"]) == ("invalid_message", False)
    assert gm.call("get_combat", combat=CALM)["combat"] == CALM
    assert gm.notes == []


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
def test_a_websocket_text_frame_is_refused_and_the_session_goes_on(gm: Client) -> None:
    gm.sock.send_text('[0, 1, "list_combats", []]')  # type: ignore[attr-defined]
    note = gm.notification()
    assert (note.params["code"], note.params["fatal"]) == ("invalid_message", False)
    assert "binary" in note.params["message"]
    assert gm.call("list_combats")


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
def test_a_websocket_text_message_that_never_ends_is_held_to_the_message_limit(
    gm: Client,
) -> None:
    # Text is refused once whole; a text message sent in parts that never finishes must not
    # be read for ever.
    ws = gm.sock.ws  # type: ignore[attr-defined]
    part = "x" * 65536
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for _ in range(wire.MAX_MESSAGE_BYTES // len(part) + 2):
            gm.sock.sock.sendall(ws.send(TextMessage(data=part, message_finished=False)))  # type: ignore[attr-defined]
    (final,) = _until_closed(gm, 10.0)
    assert final.params["code"] == "message_too_large"


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
def test_a_fatal_websocket_error_ends_with_a_close_frame(gm: Client) -> None:
    _send(gm, b"\xc1")
    (final,) = _until_closed(gm, 10.0)
    assert final.params["code"] == "malformed_msgpack"
    assert gm.sock.close_code == 1008  # type: ignore[attr-defined]


def _frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True) -> bytes:
    """One raw WebSocket frame, as RFC 6455 lays it out, for what wsproto would never send."""
    head = bytes([(0x80 if fin else 0) | opcode])
    size = len(payload)
    mask_bit = 0x80 if masked else 0
    if size < 126:
        head += bytes([mask_bit | size])
    else:
        head += bytes([mask_bit | 126]) + size.to_bytes(2, "big")
    if not masked:
        return head + payload
    key = b"\x01\x02\x03\x04"
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
def test_a_message_in_many_tiny_fragments_is_whole_and_costs_only_its_bytes(gm: Client) -> None:
    message = msgpack.packb([0, 80, "get_combat", [{"combat": CALM}]])
    frames = [_frame(0x2, message[:1], fin=False)]
    frames += [_frame(0x0, b"", fin=False)] * 20_000  # empty continuations: bytes, no payload
    frames += [_frame(0x0, message[1:])]
    gm.sock.sock.sendall(b"".join(frames))  # type: ignore[attr-defined]
    answer = gm.response(80)
    assert answer.error is None
    assert answer.result["combat"] == CALM


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
def test_closing_a_websocket_with_answers_still_queued_is_quiet(daemon: Daemon, gm: Client) -> None:
    # Many requests, then the close frame in the same write: the answers still queued when the
    # close is answered must be dropped, not sent after it (the log check finds no error line).
    requests = b"".join(
        _frame(0x2, msgpack.packb([0, 100 + i, "get_combat", [{"combat": CALM}]]))
        for i in range(400)
    )
    gm.sock.sock.sendall(requests + _frame(0x8, (1000).to_bytes(2, "big")))  # type: ignore[attr-defined]
    with contextlib.suppress(EOFError, ConnectionResetError, TimeoutError):
        while True:
            gm.notification()
    _still_serving(daemon)


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(_frame(0x2, b"\x90", masked=False), id="unmasked"),
        pytest.param(bytes([0xC2, 0x81]) + b"\x00\x00\x00\x00\x90", id="reserved_bit"),
        pytest.param(_frame(0x1, b"\xff\xfe"), id="text_not_utf8"),
    ],
)
def test_a_frame_that_breaks_the_websocket_rules_is_fatal_with_a_reason(
    daemon: Daemon, gm: Client, frame: bytes
) -> None:
    gm.sock.sock.sendall(frame)  # type: ignore[attr-defined]
    (final,) = _until_closed(gm, 10.0)
    assert (final.params["code"], final.params["fatal"]) == ("invalid_message", True)
    assert gm.sock.close_code == 1008  # type: ignore[attr-defined]
    _still_serving(daemon)


def _answers(c: Client, count: int) -> list[int]:
    """The ids of the next ``count`` responses, in the order they came."""
    c.sock.settimeout(10.0)
    seen: list[int] = []
    while len(seen) < count:
        message = msgpack.unpackb(c.sock.recv(65536))
        if message[0] == 1:
            seen.append(message[1])
    return seen


def _get(msgid: int, combat: str = CALM) -> bytes:
    return msgpack.packb([0, msgid, "get_combat", [{"combat": combat}]])


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
@pytest.mark.parametrize("size", [20, 300], ids=["short_size", "two_byte_size"])
def test_a_websocket_frame_split_anywhere_is_read_whole(gm: Client, size: int) -> None:
    # A combat id long enough for the frame's size to take two bytes: the answer is then an
    # error, but an answer to this very request.
    frame = _frame(0x2, _get(90, CALM if size < 126 else "x" * 200))
    for cut in sorted({1, 2, 3, 5, 7, len(frame) // 2, len(frame) - 1}):
        gm.sock.sock.sendall(frame[:cut])  # type: ignore[attr-defined]
        time.sleep(0.02)  # read apart, not as one chunk
        gm.sock.sock.sendall(frame[cut:])  # type: ignore[attr-defined]
        assert _answers(gm, 1) == [90]


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
def test_websocket_frames_of_every_kind_keep_their_order(gm: Client) -> None:
    # Whole binary frames, a message in fragments with a ping between them, and a request the
    # session's task must take (a command), all in one write.
    second = _get(92)
    command = msgpack.packb([0, 94, "end_turn", [{"combat": "no-such-combat"}]])
    frames = [
        _frame(0x2, _get(91)),
        _frame(0x2, second[:3], fin=False),
        _frame(0x9, b"ping"),
        _frame(0x0, second[3:]),
        _frame(0x2, _get(93)),
        _frame(0x2, command),
        _frame(0x2, _get(95)),
    ]
    gm.sock.sock.sendall(b"".join(frames))  # type: ignore[attr-defined]
    assert _answers(gm, 5) == [91, 92, 93, 94, 95]


@pytest.mark.parametrize("transport", ["ws"], indirect=True)
@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(
            [_frame(0x2, _get(96)[:3], fin=False), _frame(0x2, _get(97))],
            id="whole_message_inside_a_fragmented_one",
        ),
        pytest.param([_frame(0x0, _get(98))], id="continuation_of_nothing"),
        pytest.param(
            [bytes([0x82, 0xFE, 0x00, 0x05]) + b"\x00\x00\x00\x00" + _get(99)[:5]],
            id="size_not_in_its_fewest_bytes",
        ),
    ],
)
def test_a_websocket_frame_out_of_its_place_is_fatal(
    daemon: Daemon, gm: Client, frames: list[bytes]
) -> None:
    gm.sock.sock.sendall(b"".join(frames))  # type: ignore[attr-defined]
    (final,) = _until_closed(gm, 10.0)
    assert (final.params["code"], final.params["fatal"]) == ("invalid_message", True)
    assert gm.sock.close_code == 1008  # type: ignore[attr-defined]
    _still_serving(daemon)


def test_a_websocket_message_over_the_limit_before_hello_is_refused_by_its_head(
    daemon: Daemon,
) -> None:
    c = _raw(daemon, "ws")
    padded = msgpack.packb([0, 1, "list_combats", ["x" * wire.MAX_UNAUTHENTICATED_MESSAGE_BYTES]])
    frame = _frame(0x2, padded)
    assert frame[1] & 0x7F == 126  # its size in two bytes: a frame the daemon reads itself
    c.sock.sock.sendall(frame[:200])  # type: ignore[attr-defined]
    (final,) = _until_closed(c, 10.0)
    assert (final.params["code"], final.params["fatal"]) == ("message_too_large", True)


def test_requests_sent_right_behind_the_websocket_upgrade_are_answered(daemon: Daemon) -> None:
    assert daemon.ws_port is not None
    client = WSConnection(ConnectionType.CLIENT)
    head = client.send(WsRequest(host="127.0.0.1", target="/ws"))
    frames = _frame(0x2, msgpack.packb([0, 7, "list_combats", []])) + _frame(0x2, _get(8))
    with socket.create_connection(("127.0.0.1", daemon.ws_port), timeout=10.0) as s:
        s.sendall(head + frames[:-3])  # the last frame not whole yet
        time.sleep(0.05)
        s.sendall(frames[-3:])
        answers: list[Any] = []
        while len(answers) < 2:
            data = s.recv(65536)
            assert data, f"closed after {answers}"
            client.receive_data(data)
            answers += [
                msgpack.unpackb(e.data) for e in client.events() if isinstance(e, BytesMessage)
            ]
    # Both before hello: refused, but each by its own answer, in order.
    assert [(a[1], a[2]["code"]) for a in answers] == [(7, "hello_required"), (8, "hello_required")]
