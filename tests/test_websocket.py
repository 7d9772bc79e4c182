"""The WebSocket listener against a real daemon: the protocol over binary frames, the HTTP it
answers besides, the session's language and the narrated ``summary`` of events.

The protocol's own tests (test_daemon_auth, test_daemon_hostile) run over WebSocket as well;
these are the parts only this transport, or only ``hello``'s ``locale`` and ``narrate``, have.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, running
from story import NARRATOR, Story, player
from turnkeeper.combats.telling import numbered as _numbered
from turnkeeper.transport.listeners import MAX_WEB_CONNECTIONS
from turnkeeper.transport.websocket import HANDSHAKE_TIMEOUT, HEAD_IDLE_TIMEOUT, MAX_HEAD_BYTES
from turnkeeper_engine import BUNDLED_RULES
from turnkeeper_engine import commands as c
from turnkeeper_engine import events as ev


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, dict[str, str]]]:
    with running(tmp_path_factory.mktemp("web"), http=True) as d:
        secrets = {
            "narrator": d.token("narrator"),
            "player": d.token("player", "--user", "u1"),
        }
        _scene(d)
        yield d, secrets


def _scene(d: Daemon) -> None:
    """A marvel combat with a hidden narrator-run ambusher: ann (u1's) acts first."""
    with d.client() as gm:
        gm.call("create_combat", request_id="c", combat_id="bank", ruleset="marvel")
        gm.call(
            "add_combatant",
            request_id="a",
            combat="bank",
            id="ann",
            display_name="Ann",
            controller="u1",
            player_character=True,
        )
        gm.call(
            "add_combatant",
            request_id="s",
            combat="bank",
            id="sly",
            display_name="Sly",
            hidden=True,
        )
        gm.call("roll_initiative", request_id="ra", combat="bank", combatant="ann", faces=[6, 6, 5])
        gm.call("roll_initiative", request_id="rs", combat="bank", combatant="sly", faces=[2, 2, 2])
        gm.call("start_combat", request_id="go", combat="bank")


def _session(d: Daemon, secret: str, **hello: Any) -> Client:
    assert d.ws_port is not None
    c = Client.ws(d.ws_port)
    c.call("hello", protocol=1, token=secret, **hello)
    return c


def _get(d: Daemon, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{d.http_port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as answer:
            return answer.status, _lower(answer.headers.items()), answer.read()
    except urllib.error.HTTPError as e:
        return e.code, _lower(e.headers.items()), e.read()


def _lower(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers}


def _raw_http(port: int, request: bytes) -> bytes:
    """What the listener answers to ``request`` sent as it is (urllib would tidy it up)."""
    with socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT) as s:
        s.sendall(request)
        return s.recv(65536)


# --------------------------------------------------------------------------- the protocol


def test_a_websocket_session_commands_and_subscribes_like_any_other(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, secrets = web
    writer = _session(d, secrets["narrator"])
    reader = _session(d, secrets["narrator"])
    try:
        seq = reader.call("subscribe", combat="bank", after=0)["seq"]
        replayed = [reader.notification().params["seq"] for _ in range(seq)]
        assert replayed == list(range(1, seq + 1))
        turn = writer.call("get_combat", combat="bank")["view"]["turn"]
        done = writer.call(
            "end_turn",
            combat="bank",
            request_id="ws-end",
            turn={"round": turn["round"], "combatant": turn["combatant"]},
        )
        live = [reader.notification().params["seq"] for _ in done["events"]]
        assert live == [e["seq"] for e in done["events"]]
        # A retry with the same request_id over another connection is the same answer.
        again = reader.call(
            "end_turn",
            combat="bank",
            request_id="ws-end",
            turn={"round": turn["round"], "combatant": turn["combatant"]},
        )
        assert again == done
        writer.call("undo", combat="bank", request_id="ws-undo")
    finally:
        writer.close()
        reader.close()


def test_a_websocket_session_needs_a_token(web: tuple[Daemon, dict[str, str]]) -> None:
    d, _ = web
    assert d.ws_port is not None
    c = Client.ws(d.ws_port)
    try:
        with pytest.raises(CallError) as refused:
            c.call("hello", protocol=1)
        assert (refused.value.code, refused.value.field) == ("unauthenticated", "token")
    finally:
        c.close()


# ------------------------------------------------------------------- language and summaries


@pytest.mark.parametrize(
    ("asked", "chosen"),
    [
        (None, "en"),
        ("en-GB", "en"),
        ("pt-BR", "pt-BR"),
        ("pt_BR", "pt-BR"),
        ("pt", "pt-BR"),
        ("pt-PT", "pt-BR"),
        ("fr", "en"),
        ("", "en"),
    ],
)
def test_hello_chooses_the_sessions_language(
    web: tuple[Daemon, dict[str, str]], asked: str | None, chosen: str
) -> None:
    d, secrets = web
    hello = {} if asked is None else {"locale": asked}
    assert d.ws_port is not None
    c = Client.ws(d.ws_port)
    try:
        session = c.call("hello", protocol=1, token=secrets["narrator"], **hello)["session"]
        assert session["locale"] == chosen
    finally:
        c.close()


@pytest.mark.parametrize(
    ("params", "field"), [({"locale": 5}, "locale"), ({"narrate": "yes"}, "narrate")]
)
def test_a_malformed_locale_or_narrate_is_refused_by_field(
    web: tuple[Daemon, dict[str, str]], params: dict[str, Any], field: str
) -> None:
    d, secrets = web
    assert d.ws_port is not None
    c = Client.ws(d.ws_port)
    try:
        with pytest.raises(CallError) as refused:
            c.call("hello", protocol=1, token=secrets["narrator"], **params)
        assert (refused.value.code, refused.value.field) == ("invalid_params", field)
        with pytest.raises(CallError) as refused:
            c.call("list_combats")
        assert refused.value.code == "hello_required"
    finally:
        c.close()


def test_errors_come_in_the_sessions_language_with_the_same_code_and_field(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, secrets = web
    answers = {}
    for locale in ("en", "pt-BR"):
        c = _session(d, secrets["narrator"], locale=locale)
        try:
            with pytest.raises(CallError) as refused:
                c.call("get_combat", combat="nowhere")
            answers[locale] = refused.value
            with pytest.raises(CallError) as refused:
                c.call(
                    "end_turn",
                    combat="bank",
                    request_id=f"stale-{locale}",
                    turn={"round": 9, "combatant": "ann"},
                )
            answers[f"rule-{locale}"] = refused.value
        finally:
            c.close()
    for key in ("", "rule-"):
        en, pt = answers[f"{key}en"], answers[f"{key}pt-BR"]
        assert (en.code, en.field) == (pt.code, pt.field)
        assert en.message != pt.message
    assert "nowhere" in answers["pt-BR"].message


def test_narrated_sessions_get_a_summary_on_every_event_and_others_none(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, secrets = web
    plain = _session(d, secrets["narrator"])
    told = _session(d, secrets["narrator"], narrate=True, locale="pt-BR")
    try:
        untold = plain.call("history", combat="bank", after=0)["events"]
        assert all("summary" not in e for e in untold)
        events = told.call("history", combat="bank", after=0)["events"]
        assert [e["seq"] for e in events] == [e["seq"] for e in untold]
        summaries = {e["event"]: e["summary"] for e in events}
        assert summaries["command_recorded"] is None  # bookkeeping: a log leaves it out
        assert "Ann" in summaries["combat_started"]
        assert summaries["round_started"] == "-- Rodada 1 --"
        told.call("subscribe", combat="bank", after=0)
        first = told.notification().params
        assert "summary" in first
        # A command's own result is told too (and its retry, remembered encoded, the same way).
        params = {"target": "ann", "type": "custom", "note": "Atordoada"}
        done = told.call("apply_condition", combat="bank", request_id="told-c", **params)
        assert done["events"][-1]["summary"] == "  Ann: Atordoada."
        again = told.call("apply_condition", combat="bank", request_id="told-c", **params)
        assert again == done
        told.call("undo", combat="bank", request_id="told-undo")
    finally:
        plain.close()
        told.close()


def test_r16_a_players_summaries_never_name_a_hidden_combatant(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, secrets = web
    gm = _session(d, secrets["narrator"], narrate=True)
    player = _session(d, secrets["player"], narrate=True)
    try:
        mine = [e["summary"] or "" for e in gm.call("history", combat="bank")["events"]]
        theirs = [e["summary"] or "" for e in player.call("history", combat="bank")["events"]]
        assert any("Sly" in line for line in mine)
        assert not any("Sly" in line for line in theirs)
        assert any("Ann" in line for line in theirs)
    finally:
        gm.close()
        player.close()


# ---------------------------------------------------------------------------------- HTTP


def test_the_table_view_is_served_with_a_strict_content_policy(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, _ = web
    status, headers, body = _get(d, "/")
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert b'type="importmap"' in body
    policy = headers["content-security-policy"]
    assert "script-src 'self' 'sha256-" in policy
    assert "frame-ancestors 'none'" in policy
    status, headers, body = _get(d, "/client/index.js")
    assert (status, headers["content-type"]) == (200, "text/javascript; charset=utf-8")
    status, _, _ = _get(d, "/vendor/msgpack/index.mjs")
    assert status == 200
    status, headers, body = _get(d, "/", method="HEAD")
    assert (status, body) == (200, b"")


def test_the_pages_catalogue_is_served_per_language(web: tuple[Daemon, dict[str, str]]) -> None:
    d, _ = web
    status, _, body = _get(d, "/i18n/pt-BR.json")
    assert status == 200
    catalogue = json.loads(body)
    assert catalogue["locale"] == "pt-BR"
    assert catalogue["messages"]
    assert json.loads(_get(d, "/i18n/xx.json")[2])["locale"] == "en"


@pytest.mark.parametrize(
    ("path", "method", "status"),
    [
        ("/nothing-here.js", "GET", 404),
        ("/../../etc/passwd", "GET", 404),
        ("/%2e%2e/%2e%2e/etc/passwd", "GET", 404),
        ("/ws", "GET", 426),
        ("/", "POST", 405),
        ("/i18n/../../x.json", "GET", 404),
    ],
)
def test_http_answers_only_the_pages_files(
    web: tuple[Daemon, dict[str, str]], path: str, method: str, status: int
) -> None:
    d, _ = web
    answer = _raw_http(d.http_port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.split(b"\r\n", 1)[0].split()[1] == str(status).encode()


def test_ws_without_the_page_serves_no_files(tmp_path: Path) -> None:
    with running(tmp_path, ws=True) as d:
        assert d.ws_port is not None
        answer = _raw_http(d.ws_port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 404")


def test_an_oversized_or_garbled_request_head_is_refused(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, _ = web
    pad = b"a" * (MAX_HEAD_BYTES + 10)
    answer = _raw_http(d.http_port, b"GET / HTTP/1.1\r\nX-Pad: " + pad + b"\r\n\r\n")
    assert answer.split(b"\r\n", 1)[0].split()[1][:1] == b"4"
    answer = _raw_http(d.http_port, b"\x16\x03\x01 not http at all\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")


def test_a_request_head_that_never_ends_is_dropped_and_others_are_served(
    web: tuple[Daemon, dict[str, str]],
) -> None:
    d, secrets = web
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", d.http_port), timeout=CALL_TIMEOUT) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert _get(d, "/")[0] == 200
        c = _session(d, secrets["narrator"])
        assert c.call("list_combats")
        c.close()
        s.settimeout(HANDSHAKE_TIMEOUT + 10)
        assert s.recv(65536) == b""  # closed unanswered
    # It stopped sending: it is dropped once it has paused for HEAD_IDLE_TIMEOUT.
    assert time.monotonic() - started >= HEAD_IDLE_TIMEOUT - 0.5


def test_r16_a_hidden_combatants_turn_is_not_told_to_players_as_resuming() -> None:
    """A sequence ending during a hidden combatant's turn: the narrator's line says the turn
    resumes; a player's view has no turn, so its line must not hint at one."""
    s = Story("marvel")
    s.add("ann", "Ann", controller="u1", player_character=True)
    s.add("sly", "Sly", hidden=True)
    s.roll("ann", 2, 2, 2)
    s.roll("sly", 6, 6, 5)
    s.do(c.StartCombat())
    assert s.current == "sly"
    ended = [(99, ev.SequenceEnded("w1"))]
    (mine,) = _numbered(ended, s.state, NARRATOR, locale="en", rules=BUNDLED_RULES)
    (theirs,) = _numbered(ended, s.state, player("u1"), locale="en", rules=BUNDLED_RULES)
    assert isinstance(mine, dict)
    assert isinstance(theirs, dict)
    assert "resumes" in str(mine["summary"])
    assert theirs["summary"] is None
    # Only the hidden one claimed: the player's sequence is empty, and nothing is told of it.
    ordered = [(98, ev.SequenceOrdered("w1", (), (), ()))]
    (line,) = _numbered(ordered, s.state, player("u1"), locale="en", rules=BUNDLED_RULES)
    assert isinstance(line, dict)
    assert line["summary"] is None


def test_sigterm_closes_websocket_sessions_with_going_away(tmp_path: Path) -> None:
    with running(tmp_path, ws=True) as d:
        c = _session(d, d.token("narrator"))
        assert d.stop() == 0
        with pytest.raises((EOFError, ConnectionResetError)):
            c.notification()
        assert c.sock.close_code == 1001  # type: ignore[attr-defined]


def test_websocket_clients_cannot_take_every_connection_slot(tmp_path: Path) -> None:
    with running(tmp_path, ws=True) as d:
        assert d.ws_port is not None
        secret = d.token("observer")
        opened = []
        for _ in range(MAX_WEB_CONNECTIONS):
            session = Client.ws(d.ws_port)
            session.hello(secret)
            opened.append(session)
        try:
            one_more = Client.ws(d.ws_port)
            note = one_more.notification()
            assert (note.params["code"], note.params["fatal"]) == ("server_busy", True)
            one_more.close()
            # The Unix socket still has room: the narrator's own tools get in.
            with d.client() as c:
                assert c.call("list_combats") == []
        finally:
            for s in opened:
                s.close()
        with d.client() as c:
            c.call("list_combats")


def test_the_operator_chooses_how_many_websocket_sessions_there_may_be(tmp_path: Path) -> None:
    with running(tmp_path, False, "--max-web-connections", "3", ws=True) as d:
        assert d.ws_port is not None
        secret = d.token("observer")
        opened = [_session(d, secret) for _ in range(3)]
        try:
            one_more = Client.ws(d.ws_port)
            note = one_more.notification()
            assert (note.params["code"], note.params["fatal"]) == ("server_busy", True)
            assert "3" in note.params["message"]
            one_more.close()
        finally:
            for s in opened:
                s.close()


def test_the_daemons_wheel_carries_the_page_the_client_and_the_catalogues(tmp_path: Path) -> None:
    """web/client is a link to sdk/js/src: a built wheel must hold the files, not the link."""
    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(root / "daemon"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("turnkeeper-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (
        "turnkeeper/web/index.html",
        "turnkeeper/web/client/index.js",
        "turnkeeper/web/vendor/msgpack/index.mjs",
        "turnkeeper/locale/pt_BR/LC_MESSAGES/turnkeeper.po",
    ):
        assert name in names, name
    shipped = zipfile.ZipFile(wheel).read("turnkeeper/web/client/index.js")
    assert shipped == (root / "sdk" / "js" / "src" / "index.js").read_bytes()
