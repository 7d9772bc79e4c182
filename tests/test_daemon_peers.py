"""Hostile peers against a real daemon, over TCP, the Unix socket and WebSocket: what a peer
without a token can make the daemon buffer and decode is small and refused as early as it can
be, connections that never say hello get a small share of their own listener and no more, and
slow HTTP heads cannot hold the WebSocket endpoint. Memory and stalls are measured in
``bench/bench_decode.py``; these tests check behaviour only."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from daemon import CALL_TIMEOUT, Client, Daemon, running
from turnkeeper.transport.channel import peer_key
from turnkeeper.transport.listeners import (
    MAX_CONNECTIONS,
    MAX_PENDING,
    MAX_PENDING_PER_ADDRESS,
    UNIX_RESERVE,
)
from turnkeeper.transport.websocket import HANDSHAKE_TIMEOUT, MAX_HANDSHAKES_PER_ADDRESS
from turnkeeper_sdk import wire

TRANSPORTS = ["unix", "tcp", "ws"]
SECRETS: dict[str, str] = {}
"""The narrator token TCP and WebSocket sessions say hello with, per daemon data directory."""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with running(tmp_path_factory.mktemp("peers"), True, ws=True) as d:
        SECRETS[str(d.data_dir)] = d.token("narrator")
        yield d


def _open(d: Daemon, transport: str) -> Client:
    """A connection that has not said hello."""
    if transport == "ws":
        assert d.ws_port is not None
        return Client.ws(d.ws_port)
    if transport == "tcp":
        assert d.tcp_port is not None
        return Client.tcp(d.tcp_port)
    return Client.unix(d.socket)


def _hello(c: Client, d: Daemon, transport: str) -> None:
    c.hello(None if transport == "unix" else SECRETS[str(d.data_dir)])


def _final(c: Client, timeout: float = CALL_TIMEOUT) -> wire.Notification:
    """The daemon's last word before it closed the connection: its fatal error notification."""
    c.sock.settimeout(timeout)
    seen: list[wire.Notification] = []
    with contextlib.suppress(EOFError, ConnectionResetError):
        while True:
            seen.append(c.notification())
    assert seen, "closed without a final notification"
    final = seen[-1]
    assert (final.method, final.params["fatal"]) == (wire.ERROR_NOTIFICATION, True)
    return final


def _request(msgid: int, method: str, params: dict[str, Any]) -> bytes:
    return bytes(msgpack.packb([0, msgid, method, [params]]))


def _send(c: Client, data: bytes) -> None:
    # The daemon may close while a large write is still going: that is the point.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        c.send_raw(data)


# ------------------------------------------------------------------------ decode amplification


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "header",
    [
        pytest.param(b"\xdd" + (60_000).to_bytes(4, "big"), id="array_of_60000"),
        pytest.param(b"\xdd" + (100 * 2**20).to_bytes(4, "big"), id="array_of_100_mebi"),
        pytest.param(b"\xdf" + (4_000).to_bytes(4, "big"), id="map_of_4000"),
        # A string is read once a few of its bytes are there too.
        pytest.param(b"\xdb" + (60_000).to_bytes(4, "big") + b"x" * 9, id="string_of_60000"),
    ],
)
def test_before_hello_a_header_beyond_the_limit_is_refused_when_it_arrives(
    daemon: Daemon, transport: str, header: bytes
) -> None:
    # Every one of these was within the limits of a session, but no message before hello can
    # be that long: the header alone, with nothing after it, is refused.
    c = _open(daemon, transport)
    try:
        c.send_raw(header)
        assert _final(c).params["code"] == wire.MESSAGE_TOO_LARGE
    finally:
        c.close()


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_string_announcing_more_than_its_limit_is_refused_when_its_header_arrives(
    daemon: Daemon, transport: str
) -> None:
    # msgpack itself learns a string is too long only when it is whole; the daemon reads the
    # header itself.
    c = _open(daemon, transport)
    try:
        _hello(c, daemon, transport)
        header = b"\x94\x00\x02\xacl" + b"ist_combats\x91\x81\xa3pad\xdb"
        _send(c, header + (wire.MAX_MESSAGE_BYTES // 2).to_bytes(4, "big"))
        assert _final(c).params["code"] == wire.MESSAGE_TOO_LARGE
    finally:
        c.close()


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize(
    ("headers", "code"),
    [
        pytest.param(b"\xdc\x10\x00" * 5, wire.MESSAGE_TOO_LARGE, id="arrays_of_4096"),
        pytest.param(b"\x91" * (4 * wire.MAX_NESTING + 1), wire.NESTED_TOO_DEEPLY, id="deep"),
    ],
)
def test_a_session_s_array_headers_that_never_close_are_refused_as_they_arrive(
    daemon: Daemon, transport: str, headers: bytes, code: str
) -> None:
    # msgpack allocates an array's items at its header: 1000 such headers of 4096 items, 3 KB
    # on the wire, held 27 MiB per session until the daemon counted them on arrival.
    c = _open(daemon, transport)
    try:
        _hello(c, daemon, transport)
        _send(c, b"\x94\x00\x02\xacl" + b"ist_combats\x91" + headers)
        assert _final(c).params["code"] == code
    finally:
        c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_before_hello_a_message_over_the_small_limit_is_refused(
    daemon: Daemon, transport: str
) -> None:
    c = _open(daemon, transport)
    try:
        pad = "x" * wire.MAX_UNAUTHENTICATED_MESSAGE_BYTES
        _send(c, _request(1, "hello", {"protocol": 1, "pad": pad}))
        assert _final(c).params["code"] == wire.MESSAGE_TOO_LARGE
    finally:
        c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_message_of_empty_maps_is_refused_once_it_decodes_past_the_value_limit(
    daemon: Daemon, transport: str
) -> None:
    # 20,000 empty maps are 20 kB on the wire and a few MB decoded; a session's limit is the
    # number of values, not only bytes.
    c = _open(daemon, transport)
    try:
        _hello(c, daemon, transport)
        _send(c, _request(2, "list_combats", {"pad": [{}] * (wire.MAX_REQUEST_VALUES + 1)}))
        assert _final(c).params["code"] == wire.MESSAGE_TOO_LARGE
    finally:
        c.close()
    with _open(daemon, "unix") as still:
        _hello(still, daemon, "unix")
        assert still.call("list_combats") == []


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_a_session_gets_the_larger_limit_from_the_message_after_its_hello(
    daemon: Daemon, transport: str
) -> None:
    # Hello and a message only a session may send, in one write: the second is read under the
    # limits the hello earned.
    secret = None if transport == "unix" else SECRETS[str(daemon.data_dir)]
    hello: dict[str, Any] = {"protocol": wire.PROTOCOL_VERSION}
    if secret is not None:
        hello["token"] = secret
    big = "x" * (4 * wire.MAX_UNAUTHENTICATED_MESSAGE_BYTES)
    c = _open(daemon, transport)
    try:
        c.send_raw(_request(1, "hello", hello) + _request(2, "get_combat", {"combat": big}))
        assert c.response(1).error is None
        answer = c.response(2)
        assert answer.error is not None
        assert (answer.error.code, answer.error.field) == ("invalid_params", "combat")
        assert c.notes == []
    finally:
        c.close()


# ------------------------------------------------------------------- client notifications


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_notification_of_any_shape_is_ignored_before_and_after_hello(
    daemon: Daemon, transport: str
) -> None:
    # What pynvim sends on connect: positional params, which no Turnkeeper request may have.
    info = [2, "nvim_set_client_info", ["tests", {"major": 0}, "remote", {}, {}]]
    odd = [[2, "x", None], [2, 7, []], [2, "x", [], "extra"], [2]]
    c = _open(daemon, transport)
    try:
        for note in [info, *odd]:
            c.send_raw(msgpack.packb(note))
        _hello(c, daemon, transport)
        for note in [info, *odd]:
            c.send_raw(msgpack.packb(note))
        assert c.call("list_combats") == []
        assert c.notes == []
    finally:
        c.close()


# ---------------------------------------------------------------------------- slot exhaustion


def _idle(d: Daemon, source: str) -> socket.socket:
    """A TCP connection from ``source`` (any 127.x.y.z is loopback) that never says hello."""
    assert d.tcp_port is not None
    return socket.create_connection(
        ("127.0.0.1", d.tcp_port), timeout=CALL_TIMEOUT, source_address=(source, 0)
    )


def _refused_at_once(s: socket.socket) -> str:
    """The code of the final notification a connection was sent on connect."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            data += chunk
    (final,) = wire.Decoder().feed(data)
    assert isinstance(final, wire.Notification)
    return str(final.params["code"])


def _answers(s: socket.socket, wait: float = 0.2) -> bool:
    """Whether the daemon holds ``s`` open and has said nothing on it (it waits for more)."""
    s.settimeout(wait)
    try:
        s.recv(1, socket.MSG_PEEK)
    except (TimeoutError, BlockingIOError):
        return True
    except ConnectionResetError:
        return False
    finally:
        s.settimeout(CALL_TIMEOUT)
    return False


def _held(sockets: list[socket.socket], expected: int) -> int:
    """How many of ``sockets`` the daemon holds open, once that is ``expected`` or a while has
    passed (well within HELLO_TIMEOUT)."""
    deadline = time.monotonic() + 5.0
    while True:
        held = sum(_answers(s, 0.0) for s in sockets)
        if held == expected or time.monotonic() > deadline:
            return held
        time.sleep(0.1)


@contextlib.contextmanager
def _flood(d: Daemon, sources: list[str], each: int) -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for source in sources:
            opened += [_idle(d, source) for _ in range(each)]
        yield opened
    finally:
        for s in opened:
            s.close()
        # The daemon sees every close at once; wait until the share is free again.
        deadline = time.monotonic() + CALL_TIMEOUT
        while True:
            probe = _idle(d, "127.0.0.1")
            held = _answers(probe)
            probe.close()
            if held or time.monotonic() > deadline:
                break
            time.sleep(0.1)


def test_connections_that_never_say_hello_cannot_take_the_unix_sockets_room(
    daemon: Daemon,
) -> None:
    narrator = SECRETS[str(daemon.data_dir)]
    assert daemon.tcp_port is not None
    early = Client.tcp(daemon.tcp_port)
    early.hello(narrator)
    sources = [f"127.0.1.{i}" for i in range(1, 512 // MAX_PENDING_PER_ADDRESS + 2)]
    with _flood(daemon, sources, MAX_PENDING_PER_ADDRESS) as idle:
        assert len(idle) > 512
        # The listener's share holds the first ones; every one beyond is refused on connect.
        assert _held(idle, MAX_PENDING) == MAX_PENDING
        assert _refused_at_once(idle[-1]) == "server_busy"
        # The narrator's own socket, the WebSocket endpoint and a session already open are
        # untouched.
        with daemon.client() as c:
            assert c.call("list_combats") == []
        assert daemon.ws_port is not None
        with Client.ws(daemon.ws_port) as web:
            web.hello(narrator)
            assert web.call("list_combats") == []
        assert early.call("list_combats") == []
    early.close()


def test_one_address_holds_only_its_part_of_the_listeners_share(daemon: Daemon) -> None:
    with _flood(daemon, ["127.0.2.1"], MAX_PENDING_PER_ADDRESS) as idle:
        assert _held(idle, len(idle)) == len(idle)
        one_more = _idle(daemon, "127.0.2.1")
        assert _refused_at_once(one_more) == "server_busy"
        one_more.close()
        # Another peer still gets in, and so does this one's session once it says hello.
        assert daemon.tcp_port is not None
        other = socket.create_connection(
            ("127.0.0.1", daemon.tcp_port), timeout=CALL_TIMEOUT, source_address=("127.0.2.2", 0)
        )
        with Client(other) as c:
            c.hello(SECRETS[str(daemon.data_dir)])
            assert c.call("list_combats") == []


def test_token_sessions_over_tcp_leave_the_unix_sockets_reserve(tmp_path: Path) -> None:
    with running(tmp_path, True) as d:
        assert d.tcp_port is not None
        secret = d.token("observer")
        sessions: list[Client] = []
        try:
            for _ in range(MAX_CONNECTIONS - UNIX_RESERVE):
                c = Client.tcp(d.tcp_port)
                sessions.append(c)
                c.hello(secret)
            one_more = Client.tcp(d.tcp_port)
            sessions.append(one_more)
            assert _final(one_more).params["code"] == "server_busy"
            for _ in range(UNIX_RESERVE):
                sessions.append(d.client())
            assert sessions[-1].call("list_combats") == []
            # The sessions are all taken now, the Unix socket's too.
            with Client.unix(d.socket) as refused:
                assert _final(refused).params["code"] == "server_busy"
        finally:
            for c in sessions:
                c.close()


# ------------------------------------------------------------------------ WebSocket slowloris

TRICKLE = b"GET /ws HTTP/1.1\r\nHost: x\r\n"


def test_slow_http_heads_from_one_peer_cannot_hold_the_websocket_endpoint(
    daemon: Daemon,
) -> None:
    assert daemon.ws_port is not None
    slow: list[socket.socket] = []
    try:
        for _ in range(64):
            s = socket.create_connection(
                ("127.0.0.1", daemon.ws_port),
                timeout=CALL_TIMEOUT,
                source_address=("127.0.3.1", 0),
            )
            with contextlib.suppress(OSError):
                s.sendall(TRICKLE)
            slow.append(s)
        assert _held(slow, MAX_HANDSHAKES_PER_ADDRESS) == MAX_HANDSHAKES_PER_ADDRESS
        with Client.ws(daemon.ws_port) as web:
            web.hello(SECRETS[str(daemon.data_dir)])
            assert web.call("list_combats") == []
    finally:
        for s in slow:
            s.close()


def test_a_head_trickled_a_byte_at_a_time_is_dropped_within_the_handshake_timeout(
    daemon: Daemon,
) -> None:
    assert daemon.ws_port is not None
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", daemon.ws_port), timeout=CALL_TIMEOUT) as s:
        dropped = False
        for byte in TRICKLE * 100:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            if not _answers(s):
                dropped = True
                break
            time.sleep(0.3)
        assert dropped
    # Generous: the bound is HANDSHAKE_TIMEOUT, the machine may be slow.
    assert time.monotonic() - started < HANDSHAKE_TIMEOUT + 10


def test_an_ipv6_host_counts_as_one_peer_for_its_whole_slash_64() -> None:
    # One host is routinely given a /64: counted address by address, it would be billions of
    # peers and no per-address bound would hold it.
    assert peer_key("2001:db8:1:2::1") == peer_key("2001:db8:1:2:ffff:ffff:ffff:fffe")
    assert peer_key("2001:db8:1:2::1") != peer_key("2001:db8:1:3::1")
    assert peer_key("::ffff:192.0.2.7") == peer_key("192.0.2.7") == "192.0.2.7"
    assert peer_key("192.0.2.7") != peer_key("192.0.2.8")
