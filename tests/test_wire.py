"""The wire codec: exact bytes, any chunking, and refusals that say what to send back."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pytest

from turnkeeper_sdk import wire
from turnkeeper_sdk.wire import (
    BEFORE_HELLO,
    ERROR_NOTIFICATION,
    MAX_ARRAY_ITEMS,
    MAX_MAP_ITEMS,
    MAX_MESSAGE_BYTES,
    MAX_MSGID,
    MAX_NESTING,
    MAX_REQUEST_VALUES,
    MAX_STRING_BYTES,
    MAX_UNAUTHENTICATED_MESSAGE_BYTES,
    REQUESTS,
    Decoder,
    ErrorBody,
    Message,
    Notification,
    Packed,
    Request,
    Response,
    WireError,
    error_message,
    pack,
    pack_value,
)

END_TURN = Request(7, "end_turn", {"combat": "c1", "turn": {"round": 2, "combatant": "cap"}})
OK = Response(7, None, {"events": [{"type": "turn_ended", "round": 2}], "ok": True})
REFUSED = Response(8, ErrorBody("stale_turn", "that turn is over", "turn"), None)
EVENT = Notification("event", {"combat": "c1", "seq": 12, "hp": -1.5, "note": None})


def raw(obj: Any) -> bytes:
    """Bytes for any msgpack value, valid message or not."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def decode(*chunks: bytes) -> list[Message | WireError]:
    decoder = Decoder()
    return [item for chunk in chunks for item in decoder.feed(chunk)]


def summary(items: list[Message | WireError]) -> list[Any]:
    """Messages as they are; errors by what they say, since exceptions do not compare equal."""
    return [
        (item.code, item.field, item.msgid, item.fatal) if isinstance(item, WireError) else item
        for item in items
    ]


def only_error(items: list[Message | WireError]) -> WireError:
    assert len(items) == 1
    error = items[0]
    assert isinstance(error, WireError)
    return error


def nest(levels: int) -> Any:
    """``levels`` arrays, one inside the other, around a scalar."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


# Round trips and exact bytes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        END_TURN,
        Request(MAX_MSGID, "hello"),
        OK,
        REFUSED,
        Response(0, ErrorBody("internal", "something broke"), None),
        EVENT,
        Notification("ping"),
    ],
)
def test_every_message_kind_round_trips(message: Message) -> None:
    assert decode(pack(message)) == [message]


def test_no_params_travel_as_an_empty_params_array() -> None:
    assert msgpack.unpackb(pack(Request(1, "hello"))) == [0, 1, "hello", []]
    assert msgpack.unpackb(pack(Notification("ping"))) == [2, "ping", []]
    assert decode(raw([0, 1, "hello", [{}]])) == [Request(1, "hello")]


def test_request_bytes_are_the_protocol_example() -> None:
    # fixarray(4), type 0, msgid 7, fixstr(8) "end_turn", fixarray(1) of fixmap(1):
    # fixstr(6) "combat" -> fixstr(2) "c1".
    expected = "94 00 07 a8 656e645f7475726e 91 81 a6 636f6d626174 a2 6331"
    assert pack(Request(7, "end_turn", {"combat": "c1"})) == bytes.fromhex(expected)


def test_error_response_bytes_are_the_protocol_example() -> None:
    # fixarray(4), type 1, msgid 7, fixmap(3) {"code": "stale_turn", "message": "old turn",
    # "field": "turn"}, nil result.
    expected = (
        "94 01 07 83 a4 636f6465 aa 7374616c655f7475726e a7 6d657373616765 a8 6f6c64207475726e"
        " a5 6669656c64 a4 7475726e c0"
    )
    response = Response(7, ErrorBody("stale_turn", "old turn", "turn"), None)
    assert pack(response) == bytes.fromhex(expected)


# Chunking ----------------------------------------------------------------------------------------

STREAM = pack(END_TURN) + raw([0, 9, 5, []]) + pack(OK) + pack(REFUSED) + pack(EVENT)
STREAM_ITEMS = [
    END_TURN,
    (  # the method is not a string: answered, and the stream goes on
        "invalid_message",
        "method",
        9,
        False,
    ),
    OK,
    REFUSED,
    EVENT,
]


def test_several_messages_in_one_chunk_decode_in_order() -> None:
    assert summary(decode(STREAM)) == STREAM_ITEMS


def test_a_stream_split_at_any_byte_boundary_decodes_the_same() -> None:
    for cut in range(len(STREAM) + 1):
        assert summary(decode(STREAM[:cut], STREAM[cut:])) == STREAM_ITEMS, cut


def test_a_stream_fed_one_byte_at_a_time_decodes_the_same() -> None:
    chunks = [STREAM[i : i + 1] for i in range(len(STREAM))]
    assert summary(decode(*chunks)) == STREAM_ITEMS


def test_an_incomplete_message_waits_for_the_rest() -> None:
    decoder = Decoder()
    data = pack(END_TURN)
    assert decoder.feed(data[:-1]) == []
    assert decoder.feed(data[-1:]) == [END_TURN]


# Invalid shapes: answered, then decoding goes on ------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field", "msgid"),
    [
        pytest.param({"method": "end_turn"}, "", None, id="not an array"),
        pytest.param([], "type", None, id="empty array"),
        pytest.param([3, 1, "end_turn", []], "type", None, id="unknown type"),
        pytest.param([True, 1, "end_turn", []], "type", None, id="boolean type"),
        pytest.param([0, 7, "end_turn"], "", 7, id="request too short"),
        pytest.param([0, 7, "end_turn", [], None], "", 7, id="request too long"),
        pytest.param([0, "7", "end_turn", []], "msgid", None, id="msgid a string"),
        pytest.param([0, True, "end_turn", []], "msgid", None, id="msgid a boolean"),
        pytest.param([0, -1, "end_turn", []], "msgid", None, id="msgid negative"),
        pytest.param([0, MAX_MSGID + 1, "end_turn", []], "msgid", None, id="msgid over 32 bits"),
        pytest.param([0, 7, 5, []], "method", 7, id="method not a string"),
        pytest.param([0, 7, "end_turn", {"combat": "c1"}], "params", 7, id="params a map"),
        pytest.param([0, 7, "end_turn", ["c1"]], "params", 7, id="first param not a map"),
        pytest.param([0, 7, "end_turn", [{}, {}]], "params", 7, id="extra params"),
        pytest.param([0, 7, "end_turn", [{b"combat": "c1"}]], "params", 7, id="bin map key"),
        pytest.param([0, 7, "end_turn", [{"note": b"\x00"}]], "params.note", 7, id="bin value"),
        pytest.param(
            [0, 7, "end_turn", [{"at": [msgpack.ExtType(5, b"x")]}]],
            "params.at[0]",
            7,
            id="ext value",
        ),
        pytest.param([1, 7, None], "", None, id="response too short"),
        pytest.param([1, -1, None, None], "msgid", None, id="response msgid negative"),
        pytest.param([1, 7, "boom", None], "error", None, id="error not a map"),
        pytest.param([1, 7, {"message": "boom"}, None], "error.code", None, id="error no code"),
        pytest.param(
            [1, 7, {"code": "x", "message": 1}, None], "error.message", None, id="message"
        ),
        pytest.param([1, 7, None, {"blob": b"\x00"}], "result.blob", None, id="bin result"),
        pytest.param([2, "event", [], None], "", None, id="notification too long"),
        pytest.param([2, 5, []], "method", None, id="notification method not a string"),
        pytest.param([2, "event", [[]]], "params", None, id="notification param not a map"),
    ],
)
def test_an_invalid_message_is_refused_and_the_next_one_decodes(
    bad: Any, field: str, msgid: int | None
) -> None:
    items = decode(raw(bad) + pack(END_TURN))
    assert summary(items) == [("invalid_message", field, msgid, False), END_TURN]


def test_a_response_is_never_answered_even_when_its_msgid_is_readable() -> None:
    error = only_error(decode(raw([1, 7, None])))
    assert error.msgid is None
    assert isinstance(error_message(error), Notification)


def test_unknown_keys_in_an_error_are_ignored() -> None:
    data = raw([1, 7, {"code": "x", "message": "m", "hint": "later"}, None])
    assert decode(data) == [Response(7, ErrorBody("x", "m"), None)]


# Nesting -----------------------------------------------------------------------------------------


def test_params_may_nest_max_nesting_deep() -> None:
    # The params map is the first level.
    request = Request(7, "end_turn", {"deep": nest(MAX_NESTING - 1)})
    assert decode(pack(request)) == [request]


def test_params_nested_deeper_are_refused_and_the_next_message_decodes() -> None:
    too_deep = pack(Request(7, "end_turn", {"deep": nest(MAX_NESTING)}))
    items = decode(too_deep + pack(EVENT))
    field = "params.deep" + "[0]" * (MAX_NESTING - 1)
    assert summary(items) == [("nested_too_deeply", field, 7, False), EVENT]


def test_a_result_nested_deeper_is_refused_without_a_msgid() -> None:
    error = only_error(decode(pack(Response(7, None, nest(MAX_NESTING + 1)))))
    assert (error.code, error.msgid, error.fatal) == ("nested_too_deeply", None, False)


def test_nesting_past_what_msgpack_itself_can_track_is_fatal() -> None:
    # msgpack's C decoder stops near 1024 levels and cannot resume after it.
    error = only_error(decode(b"\x91" * 2000 + b"\xc0"))
    assert (error.code, error.fatal) == ("nested_too_deeply", True)


# Fatal: the stream can no longer be trusted -----------------------------------------------------


def test_malformed_msgpack_is_fatal_and_feeding_again_raises_it() -> None:
    decoder = Decoder()
    error = only_error(decoder.feed(b"\xc1"))
    assert (error.code, error.msgid, error.fatal) == ("malformed_msgpack", None, True)
    with pytest.raises(WireError) as raised:
        decoder.feed(pack(END_TURN))
    assert raised.value is error


def test_messages_before_malformed_bytes_are_still_delivered() -> None:
    assert summary(decode(pack(END_TURN) + b"\xc1" + pack(EVENT))) == [
        END_TURN,
        ("malformed_msgpack", "", None, True),
    ]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(raw([2, "event", [{1: "one"}]]), id="integer map key"),
        pytest.param(b"\x93\x02\xa2\xff\xfe\x90", id="invalid UTF-8"),
    ],
)
def test_values_msgpack_refuses_while_decoding_are_fatal(data: bytes) -> None:
    error = only_error(decode(data + pack(EVENT)))
    assert (error.code, error.fatal) == ("malformed_msgpack", True)


def request_of_size(size: int) -> Request:
    """A request whose encoding is exactly ``size`` bytes, its strings well within the limit."""
    piece = "x" * 30_000
    # One piece fewer than fits, so the filler is 30-60 kB: always a str16 with a 3-byte header,
    # where an empty filler has a 1-byte one.
    params = {"blob": [piece] * (size // 30_010 - 1), "filler": ""}
    missing = size - len(raw([0, 1, "import", [params]]))
    request = Request(1, "import", {**params, "filler": "x" * (missing - 2)})
    assert len(raw([0, 1, "import", [request.params]])) == size
    return request


def in_chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("chunk", [MAX_MESSAGE_BYTES * 2, 64 * 1024, 7777])
def test_a_message_of_exactly_max_message_bytes_decodes(chunk: int) -> None:
    largest = request_of_size(MAX_MESSAGE_BYTES)
    data = pack(largest) + pack(END_TURN)
    assert decode(*in_chunks(data, chunk)) == [largest, END_TURN]


@pytest.mark.parametrize("chunk", [MAX_MESSAGE_BYTES * 2, 64 * 1024, 7777])
def test_a_message_over_max_message_bytes_is_fatal(chunk: int) -> None:
    params = request_of_size(MAX_MESSAGE_BYTES + 1).params
    oversize = pack(END_TURN) + raw([0, 1, "import", [params]])
    items = decode(*in_chunks(oversize, chunk))
    assert summary(items) == [END_TURN, ("message_too_large", "", None, True)]


def test_pack_refuses_a_message_no_peer_would_take_and_names_its_msgid() -> None:
    with pytest.raises(WireError) as raised:
        pack(Response(9, None, {"blob": ["x" * MAX_STRING_BYTES] * 16}))
    assert (raised.value.code, raised.value.msgid, raised.value.fatal) == (
        "message_too_large",
        9,
        False,
    )


def test_a_message_that_fails_to_pack_leaves_nothing_behind_for_the_next() -> None:
    # Packing reuses one packer per thread: what a failed message wrote into it must not
    # lead the next message's bytes.
    with pytest.raises(TypeError):
        pack(Response(1, None, {"ok": [1, 2, 3], "bad": object()}))
    with pytest.raises(WireError):
        pack(Response(2, None, {"blob": ["x" * MAX_STRING_BYTES] * 16}))
    assert decode(pack(END_TURN)) == [END_TURN]


def test_threads_packing_at_once_each_get_their_own_messages() -> None:
    messages = [Notification("event", {"seq": n, "text": "x" * (n % 97)}) for n in range(2000)]

    def packed_all(offset: int) -> list[bytes]:
        return [pack(m) for m in messages[offset:] + messages[:offset]]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(packed_all, (0, 500, 1000, 1500)))
    expected = [msgpack.packb([2, "event", [m.params]], use_bin_type=True) for m in messages]
    for offset, result in zip((0, 500, 1000, 1500), results, strict=True):
        assert result == expected[offset:] + expected[:offset]


def test_packing_from_inside_a_pack_on_the_same_thread_garbles_neither_message() -> None:
    # A dict subclass's ``items`` runs Python while msgpack packs it (an SDK user's params
    # can be one): a message packed there must not go into the middle of the outer one.
    inner: list[bytes] = []

    class Noisy(dict[str, Any]):
        def items(self) -> Any:  # type: ignore[override]
            inner.append(pack_value({"inner": 1}))
            return super().items()

    outer = pack_value(["head", Noisy(k="v")])
    assert inner == [msgpack.packb({"inner": 1})]
    assert outer == msgpack.packb(["head", {"k": "v"}])


def test_a_thread_does_not_keep_the_buffer_of_a_message_refused_as_too_large() -> None:
    with pytest.raises(WireError):
        pack(Response(2, None, {"blob": ["x" * MAX_STRING_BYTES] * 16}))
    # msgpack never shrinks a packer's buffer: a kept one would hold the refused message's
    # size for the thread's life. What packs next gets a new packer, and the right bytes.
    assert getattr(wire._packers, "packer", None) is None
    assert decode(pack(END_TURN)) == [END_TURN]
    assert getattr(wire._packers, "packer", None) is not None


def test_a_string_of_max_string_bytes_decodes() -> None:
    request = Request(7, "note", {"text": "é" * (MAX_STRING_BYTES // 2)})
    assert decode(pack(request)) == [request]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("x" * (MAX_STRING_BYTES + 1), id="string"),
        pytest.param(b"x" * (MAX_STRING_BYTES + 1), id="bin"),
        pytest.param([None] * (MAX_ARRAY_ITEMS + 1), id="array"),
        pytest.param({str(i): None for i in range(MAX_MAP_ITEMS + 1)}, id="map"),
    ],
)
def test_a_value_over_its_length_limit_is_fatal(value: Any) -> None:
    error = only_error(decode(raw([0, 7, "note", [{"value": value}]]) + pack(EVENT)))
    assert (error.code, error.fatal) == ("message_too_large", True)


def test_arrays_and_maps_at_their_limits_decode() -> None:
    request = Request(7, "import", {"rows": [None] * MAX_ARRAY_ITEMS})
    table = {str(i): i for i in range(MAX_MAP_ITEMS)}
    assert decode(pack(request), pack(Notification("table", table))) == [
        request,
        Notification("table", table),
    ]


# A daemon's limits -------------------------------------------------------------------------------


def test_values_past_the_limit_are_fatal_however_few_bytes_they_are() -> None:
    empty_maps = raw([0, 7, "note", [{"pad": [{}] * MAX_REQUEST_VALUES}]])
    assert len(empty_maps) < MAX_UNAUTHENTICATED_MESSAGE_BYTES * 3
    error = only_error(Decoder(REQUESTS).feed(empty_maps))
    assert (error.code, error.fatal) == ("message_too_large", True)
    # A client reading the daemon counts no values.
    assert len(Decoder().feed(empty_maps)) == 1


@pytest.mark.parametrize("header", [b"\xdc\x01\x01", b"\xde\x00\x81", b"\xda\x20\x01"])
def test_before_hello_an_array_map_or_string_header_past_the_limit_is_fatal_on_arrival(
    header: bytes,
) -> None:
    # 257 items, 129 entries, an 8193-byte string: nothing after the header is needed.
    decoder = Decoder(BEFORE_HELLO)
    error = only_error(decoder.feed(header))
    assert (error.code, error.fatal) == ("message_too_large", True)


@pytest.mark.parametrize(
    "header",
    [b"\xdb\x00\x08\x00\x00", b"\xc6\x00\x08\x00\x00", b"\xc9\x00\x08\x00\x00"],
    ids=["str", "bin", "ext"],
)
def test_a_string_announcing_more_than_its_limit_is_refused_when_its_header_arrives(
    header: bytes,
) -> None:
    decoder = Decoder(REQUESTS)
    error = only_error(decoder.feed(raw([0, 7, "note", [{"text": None}]])[:-1] + header))
    assert (error.code, error.fatal) == ("message_too_large", True)


def test_bytes_before_a_string_that_read_like_a_long_header_do_not_refuse_it() -> None:
    # Each integer ends in bytes that, read from the wrong place, announce a long string.
    items: list[Any] = []
    for number in (0xDB7FFFFF, 0xC9FFFFFF, 0xC6FFFFFFFF, 0xDAFF):
        items += [number, "z" * 300]
    request = Request(7, "note", {"items": items})
    assert decode(*in_chunks(pack(request), 11)) == [request]


def test_new_limits_hold_from_the_message_after_the_one_returned() -> None:
    big = Request(2, "note", {"text": "x" * (2 * MAX_UNAUTHENTICATED_MESSAGE_BYTES)})
    decoder = Decoder(BEFORE_HELLO)
    decoder.push(pack(END_TURN) + pack(big) + pack(EVENT))
    assert decoder.next() == END_TURN
    decoder.limit(REQUESTS)
    assert [decoder.next(), decoder.next(), decoder.next()] == [big, EVENT, None]
    assert not decoder.pending


def test_a_bad_notification_is_marked_so_a_daemon_can_ignore_it() -> None:
    error = only_error(decode(raw([2, "nvim_set_client_info", ["x", {}, "remote", {}, {}]])))
    assert (error.code, error.notification, error.fatal) == ("invalid_message", True, False)
    assert not only_error(decode(raw([0, 1, "x", ["positional"]]))).notification


# What the server sends back ----------------------------------------------------------------------


def test_a_request_error_is_answered_with_an_error_response() -> None:
    error = only_error(decode(raw([0, 7, 5, []])))
    assert error_message(error) == Response(
        7, ErrorBody("invalid_message", "method must be a string", "method"), None
    )


def test_an_error_without_a_msgid_becomes_an_error_notification() -> None:
    error = only_error(decode(raw([3])))
    assert error_message(error) == Notification(
        ERROR_NOTIFICATION,
        {
            "code": "invalid_message",
            "message": "a message's type must be 0, 1 or 2",
            "field": "type",
            "fatal": False,
        },
    )


def test_a_fatal_error_becomes_the_final_error_notification() -> None:
    error = only_error(decode(b"\xc1"))
    reply = error_message(error)
    assert isinstance(reply, Notification)
    assert reply.method == ERROR_NOTIFICATION
    assert reply.params["code"] == "malformed_msgpack"
    assert reply.params["fatal"] is True
    assert decode(pack(reply)) == [reply]


def test_array_headers_count_what_they_announce_when_they_arrive() -> None:
    # msgpack allocates an array's items at its header: a message that announces 4096 items
    # level after level and never sends one would cost megabytes for a few bytes each.
    decoder = Decoder(REQUESTS)
    opening = raw([0, 7, "note", [None]])[:-1]
    error = only_error(decoder.feed(opening + b"\xdc\x10\x00" * 5))
    assert (error.code, error.fatal) == ("message_too_large", True)
    assert "16384 values" in error.message
    before_hello = Decoder(BEFORE_HELLO)
    error = only_error(before_hello.feed(opening + b"\xde\x00\x80"))  # 128 entries: 257 values
    assert (error.code, error.fatal) == ("message_too_large", True)


def test_arrays_nested_without_end_are_refused_long_before_msgpack_gives_up() -> None:
    decoder = Decoder(REQUESTS)
    assert decoder.feed(b"\x91" * (4 * MAX_NESTING)) == []
    error = only_error(decoder.feed(b"\x91"))
    assert (error.code, error.fatal) == ("nested_too_deeply", True)


def test_a_request_trickled_a_byte_at_a_time_decodes_whole() -> None:
    request = Request(7, "note", {"text": "x" * 20_000})
    decoder = Decoder(REQUESTS)
    data = pack(request)
    items: list[Any] = []
    for i in range(len(data)):
        items += decoder.feed(data[i : i + 1])
    assert items == [request]


def test_a_result_packed_once_goes_out_as_the_same_bytes_as_its_value() -> None:
    view = {"combat": "c1", "seq": 12, "view": {"order": ["a", "b"], "round": 2, "hp": None}}
    for msgid in (0, 7, 300, MAX_MSGID):
        once = pack_value(view)
        assert isinstance(once, Packed)
        assert pack(Response(msgid, None, once)) == pack(Response(msgid, None, view))
        assert decode(pack(Response(msgid, None, once))) == [Response(msgid, None, view)]


# What arrives whole in one read is decoded by msgpack at once, what does not by the scanner:
# the two must agree on every message and every refusal, at the same place in the stream.
WHOLE_OR_TRICKLED = [
    pack(END_TURN),
    pack(Request(1, "get_combat", {"combat": "c1"})) * 3,
    raw([0, 1, "x", [nest(MAX_NESTING)]]),
    raw([0, 1, "x", [nest(MAX_NESTING + 1)]]),
    raw([0, 1, nest(120), []]),
    b"\x91" * (4 * MAX_NESTING) + b"\x90",
    b"\x91" * (4 * MAX_NESTING + 1) + b"\x90",
    raw([0, 7, "note", [None]])[:-1] + b"\xdc\x10\x00" * 5,
    raw([0, 7, "note", [{"a": [[]] * 60}]]),
    raw([0, 7, "note", [{"a": [[]] * 126}]]),
    raw([0, 7, {"k": 1}, []]),
    raw([0, 7, "note", [{"k": b"bin"}]]),
    b"\x94\x00\x07\xc1",
    b"\x81\x01\x02" + pack(END_TURN),
    raw([2, "ping", []]) + raw(7) + raw([1, 3, None, [1, 2]]),
]


@pytest.mark.parametrize("limits", [REQUESTS, BEFORE_HELLO], ids=["requests", "before_hello"])
@pytest.mark.parametrize("data", WHOLE_OR_TRICKLED)
def test_a_stream_read_whole_decodes_as_when_trickled(data: bytes, limits: Any) -> None:
    whole = Decoder(limits).feed(data)
    decoder = Decoder(limits)
    trickled: list[Message | WireError] = []
    for i in range(len(data)):
        trickled += decoder.feed(data[i : i + 1])
        if trickled and isinstance(trickled[-1], WireError) and trickled[-1].fatal:
            break
    assert summary(whole) == summary(trickled)
    assert [str(e) for e in whole if isinstance(e, WireError)] == [
        str(e) for e in trickled if isinstance(e, WireError)
    ]


@pytest.mark.parametrize("size", [10, 60_000], ids=["whole_in_the_window", "scanned"])
def test_a_decoder_keeps_none_of_the_bytes_it_has_read(size: int) -> None:
    # A WebSocket connection keeps its decoder from one message to the next: were its used-up
    # backlog a slice of the last frame, a connection gone quiet would hold that frame.
    decoder = Decoder(REQUESTS)
    data = msgpack.packb([0, 1, "list_combats", [{"note": "x" * size}]])
    held = sys.getrefcount(data)
    (message,) = decoder.feed(data)
    assert isinstance(message, Request)
    assert not decoder.pending
    assert sys.getrefcount(data) == held
