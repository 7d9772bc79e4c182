"""The ``turnkeeper`` command as a user meets it: real subprocesses with their own environment,
real daemons, real sockets. A failure is a line or two naming the problem and a non-zero exit,
never a traceback (unless ``--debug`` asks for one)."""

from __future__ import annotations

import base64
import json
import os
import queue
import socket
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import CALL_TIMEOUT, Client, Daemon, add_spidey, running
from story import Story
from turnkeeper.auth import SECRET_PREFIX, TOKEN_BYTES, new_secret
from turnkeeper.cli import _tcp
from turnkeeper.watch import GaveUp, render, watch
from turnkeeper_engine import NARRATOR, view
from turnkeeper_engine import commands as c
from turnkeeper_engine.plain import to_plain

WAIT = 30.0
"""Seconds a test waits for a board or a process, on a loaded machine."""


def turnkeeper(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``turnkeeper ARGS`` in a subprocess, with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def said(stderr: str) -> list[str]:
    """What the command told its user on stderr: every line that is not a JSON log line."""
    return [line for line in stderr.splitlines() if line and not line.startswith("{")]


def logged(d: Daemon) -> list[dict[str, Any]]:
    """The JSON lines the daemon has logged whole (the last one may be half written)."""
    lines = d.log.read_text().splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("\n")]


def serving(d: Daemon) -> dict[str, Any]:
    """The start-up's ``serving`` line. It is logged once every listener is open, just after
    the Unix socket listens: a client that reached the socket may read the log before it."""
    deadline = time.monotonic() + CALL_TIMEOUT
    while not (found := [e for e in logged(d) if e["event"] == "serving"]):
        assert time.monotonic() < deadline, "no serving line logged"
        time.sleep(0.01)
    (line,) = found
    return line


def serve(
    tmp_path: Path, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``turnkeeper serve`` on a fresh socket, logging JSON; for start-ups that must fail."""
    socket_path = tmp_path / "run" / "turnkeeper.sock"
    return turnkeeper("serve", "--socket", socket_path, "--log-format", "json", *args, env=env)


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    return path


# ------------------------------------------------------------------------------ start-up


@pytest.mark.parametrize(("flag", "what"), [("--tcp", "TCP"), ("--ws", "WebSocket")])
def test_a_port_in_use_is_named_in_one_line_and_the_start_fails(
    tmp_path: Path, flag: str, what: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = private_dir(tmp_path / "data")
        done = serve(tmp_path, "--data-dir", data, flag, f"127.0.0.1:{port}")
        debug = serve(tmp_path, "--data-dir", data, flag, f"127.0.0.1:{port}", "--debug")
    assert done.returncode == 1
    assert said(done.stderr) == [
        f"turnkeeper: cannot listen for {what} on 127.0.0.1:{port}: Address already in use"
    ]
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr


def test_a_data_dir_below_a_regular_file_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    done = serve(tmp_path, "--data-dir", tmp_path / "file" / "data")
    assert done.returncode == 1
    (line,) = said(done.stderr)
    assert line.startswith("turnkeeper: ")
    assert str(tmp_path / "file") in line
    assert "Traceback" not in done.stderr


def test_an_unopenable_store_is_one_line_naming_the_data_dir(tmp_path: Path) -> None:
    """The database path is a directory: SQLite cannot open it, whoever runs the daemon."""
    data = private_dir(tmp_path / "data")
    (data / "turnkeeper.db").mkdir()
    done = serve(tmp_path, "--data-dir", data)
    assert done.returncode == 1
    (line,) = said(done.stderr)
    assert line.startswith("turnkeeper: ")
    assert str(data) in line
    assert "Traceback" not in done.stderr
    debug = serve(tmp_path, "--data-dir", data, env={"TURNKEEPER_DEBUG": "1"})
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr


def test_a_socket_below_a_regular_file_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    data = private_dir(tmp_path / "data")
    socket_path = tmp_path / "file" / "turnkeeper.sock"
    done = turnkeeper("serve", "--data-dir", data, "--socket", socket_path, "--log-format", "json")
    assert done.returncode == 1
    (line,) = said(done.stderr)
    assert line.startswith("turnkeeper: ")
    assert str(tmp_path / "file") in line
    assert "Traceback" not in done.stderr


BAD_ENVIRONMENT = {
    "TURNKEEPER_SNAPSHOT_EVERY": "abc",
    "TURNKEEPER_MAX_DB_MIB": "-1",
    "TURNKEEPER_MAX_CONNECTIONS": "0",
    "TURNKEEPER_MAX_WEB_CONNECTIONS": "many",
    "TURNKEEPER_TCP": "nonsense",
    "TURNKEEPER_WS": "127.0.0.1:99999",
    "TURNKEEPER_PLUGIN_BUDGET_MS": "0",
    "TURNKEEPER_PLUGINS": ",",
    "TURNKEEPER_LOG_FORMAT": "fancy",
    "TURNKEEPER_NO_PEER_NARRATOR": "yes",
    "TURNKEEPER_DEBUG": "2",
}
"""One value per variable that ``serve`` cannot use."""


def test_bad_environment_values_never_stop_help() -> None:
    for args in (["--help"], ["serve", "--help"], ["token", "add", "--help"]):
        done = turnkeeper(*args, env=BAD_ENVIRONMENT)
        assert done.returncode == 0, done.stderr
        assert "usage: turnkeeper" in done.stdout
        assert done.stderr == ""


@pytest.mark.parametrize(("name", "value"), sorted(BAD_ENVIRONMENT.items()))
def test_a_bad_environment_value_is_a_usage_error_naming_the_variable(
    tmp_path: Path, name: str, value: str
) -> None:
    socket_path = tmp_path / "run" / "turnkeeper.sock"
    done = turnkeeper(
        "serve", "--data-dir", tmp_path / "data", "--socket", socket_path, env={name: value}
    )
    assert done.returncode == 2
    assert said(done.stderr)[-1].startswith(f"turnkeeper: error: {name}={value!r}: ")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()


# --------------------------------------------------------------------------- command line


def test_global_options_come_before_or_after_the_command_and_its_action(tmp_path: Path) -> None:
    data = private_dir(tmp_path / "data")
    added = turnkeeper("token", "add", "player", "--user", "x", "--data-dir", data)
    assert added.returncode == 0, added.stderr
    token_id = added.stdout.split()[0]
    for args in (
        ["--data-dir", data, "token", "list"],
        ["token", "--data-dir", data, "list"],
        ["token", "list", "--data-dir", data, "--debug"],
        ["--debug", "token", "list", "--data-dir", data],
    ):
        listed = turnkeeper(*args)
        assert (listed.returncode, listed.stdout) == (0, f"{token_id} player x\n"), args
    unused = turnkeeper("--data-dir", data, "demo")
    assert unused.returncode == 2
    assert said(unused.stderr)[-1] == "turnkeeper: error: demo takes no --data-dir"


def test_token_secrets_never_start_with_a_dash_and_keep_all_their_random_bits() -> None:
    """About 1 base64url secret in 64 starts with ``-``, which ``--token SECRET`` reads as an
    option. The prefix rules that out without taking any of the 256 random bits."""
    draws = [new_secret() for _ in range(20_000)]
    assert not any(s.startswith("-") for s in draws)
    assert len(set(draws)) == len(draws)
    randoms = [s.removeprefix(SECRET_PREFIX) for s in draws]
    assert all(len(base64.urlsafe_b64decode(r + "=")) == TOKEN_BYTES for r in randoms)
    # Every base64url symbol still opens the random part: its first character is not narrowed.
    assert {r[0] for r in randoms} == set(string.ascii_letters + string.digits + "-_")


def into_a_closed_pipe(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``turnkeeper ARGS | head`` where head has gone before the first line is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "turnkeeper.cli", *map(str, args)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


def test_a_reader_that_goes_away_ends_the_listing_quietly() -> None:
    done = into_a_closed_pipe("plugins")
    assert done.stderr == ""
    assert done.returncode == 128 + 13  # as for a tool that SIGPIPE ended


# --------------------------------------------------------------------------- token file


def test_a_malformed_token_file_stops_the_start_and_every_token_command(
    tmp_path: Path,
) -> None:
    data = private_dir(tmp_path / "data")
    tokens = data / "tokens.json"
    tokens.write_text('[{"id": "ab12", "role": "narrator"}]')
    problem = (
        f"turnkeeper: {tokens}: token 1 does not have exactly the fields "
        "id, role, user, narrator, hash, created"
    )
    started = serve(tmp_path, "--data-dir", data)
    assert started.returncode == 1
    assert said(started.stderr) == [problem]
    for action in (["list"], ["add", "narrator"], ["revoke", "ab12"]):
        done = turnkeeper("token", *action, "--data-dir", data)
        assert (done.returncode, said(done.stderr)) == (1, [problem]), action
    assert tokens.read_text() == '[{"id": "ab12", "role": "narrator"}]'
    tokens.write_text("{not json")
    done = turnkeeper("token", "list", "--data-dir", data)
    assert done.returncode == 1
    assert said(done.stderr)[0].startswith(f"turnkeeper: {tokens}: not valid JSON (")


def test_a_token_file_broken_while_running_keeps_the_last_good_tokens_and_logs_it(
    tmp_path: Path,
) -> None:
    with running(tmp_path, tcp=True) as d:
        secret = d.token("observer")
        assert d.tcp_port is not None
        with Client.tcp(d.tcp_port) as c:
            c.hello(secret)  # the daemon has read the file with this token in it
        (d.data_dir / "tokens.json").write_text('[{"id": ')
        for _ in range(3):
            with Client.tcp(d.tcp_port) as c:
                assert c.hello(secret)["session"]["role"] == "observer"
                assert c.call("list_combats") == []
        errors = [e for e in logged(d) if e["level"] == "error"]
        assert [(e["event"], e["path"]) for e in errors] == [
            ("token_file_invalid", str(d.data_dir / "tokens.json"))
        ]
        assert errors[0]["problem"].startswith(f"{d.data_dir / 'tokens.json'}: not valid JSON")


# ------------------------------------------------------------------------------- the log


def test_the_start_up_log_gives_the_table_views_url(tmp_path: Path) -> None:
    with running(tmp_path, http=True) as d:
        line = serving(d)
        assert line["table_view"] == f"http://127.0.0.1:{d.http_port}/"
        assert line["websocket"] == f"ws://127.0.0.1:{d.http_port}/ws"


@pytest.mark.parametrize(("flags", "loop"), [((), "uvloop"), (("--loop", "asyncio"), "asyncio")])
def test_serve_runs_on_uvloop_where_installed_unless_asyncio_is_asked_for(
    tmp_path: Path, flags: tuple[str, ...], loop: str
) -> None:
    # The development environment installs the uvloop extra, so the default takes it.
    with running(private_dir(tmp_path / loop), True, *flags) as d:
        assert serving(d)["loop"] == loop
        c = d.client()
        add_spidey(c)
        assert c.call("get_combat", combat="bank")["seq"] == 4  # two commands, two events each
        secret = d.token("observer")
        assert d.tcp_port is not None
        with Client.tcp(d.tcp_port) as tcp:  # a TCP peer on the same loop
            assert tcp.hello(secret)["session"]["role"] == "observer"
        assert d.stop() == 0


def test_loop_uvloop_without_uvloop_installed_is_a_usage_error(tmp_path: Path) -> None:
    # ``None`` in sys.modules makes ``import uvloop`` fail as if it were not installed.
    script = (
        "import sys; sys.modules['uvloop'] = None; from turnkeeper.cli import main; "
        "sys.exit(main())"
    )
    socket_path = private_dir(tmp_path / "run") / "turnkeeper.sock"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "serve",
            "--loop",
            "uvloop",
            "--socket",
            str(socket_path),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert said(done.stderr) == [
        "turnkeeper: --loop uvloop: uvloop is not installed (pip install uvloop)"
    ]
    assert not socket_path.exists()


def test_one_line_per_request_is_logged_only_with_debug(tmp_path: Path) -> None:
    with running(private_dir(tmp_path / "quiet")) as d:
        d.client().call("list_combats")
        assert d.stop() == 0
        assert not [e for e in logged(d) if e["event"] == "request"]
    with running(private_dir(tmp_path / "debug"), False, "--debug") as d:
        d.client().call("list_combats")
        assert d.stop() == 0
        requests = [e for e in logged(d) if e["event"] == "request"]
        assert [(e["level"], e["method"]) for e in requests] == [
            ("debug", "hello"),
            ("debug", "list_combats"),
        ]


# --------------------------------------------------------------------------------- watch


def _roll(c: Client) -> None:
    """Spider-Man rolls and the combat starts: the board shows him in the order."""
    c.call("roll_initiative", request_id="roll", combat="bank", combatant="spidey", faces=[6, 6, 6])
    c.call("start_combat", request_id="start", combat="bank")


def _board_with(boards: queue.Queue[str], text: str) -> str:
    deadline = time.monotonic() + WAIT
    while True:
        board = boards.get(timeout=max(0.1, deadline - time.monotonic()))
        if text in board:
            return board


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[Daemon]:
    with running(tmp_path) as d:
        add_spidey(d.client())
        yield d


def test_watch_stays_up_through_a_silence_longer_than_its_call_timeout(watched: Daemon) -> None:
    boards: queue.Queue[str] = queue.Queue()
    watcher = Client.unix(watched.socket, timeout=0.5)
    watcher.hello()
    thread = threading.Thread(target=watch, args=(watcher, "bank", boards.put), daemon=True)
    thread.start()
    _board_with(boards, "bank (Marvel Multiverse RPG)")
    time.sleep(3.0)  # the silence under test: six of the watcher's call timeouts
    assert thread.is_alive()
    _roll(watched.client())
    _board_with(boards, "Spider-Man")


def test_watch_reconnects_across_a_restart_and_gives_up_with_a_message(
    watched: Daemon,
) -> None:
    boards: queue.Queue[str] = queue.Queue()
    statuses: list[str] = []
    ended: list[BaseException] = []

    def follow(reconnect_for: float, over: threading.Event) -> threading.Thread:
        def connect() -> Client:
            if over.is_set():
                raise RuntimeError("the test is over")
            c = Client.unix(watched.socket, timeout=CALL_TIMEOUT)
            c.hello()
            return c

        def run() -> None:
            try:
                watch(
                    connect(),
                    "bank",
                    boards.put,
                    reconnect=connect,
                    reconnect_for=reconnect_for,
                    status=statuses.append,
                )
            except BaseException as e:
                ended.append(e)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    patient_over = threading.Event()
    patient = follow(120.0, patient_over)
    _board_with(boards, "bank (Marvel Multiverse RPG)")
    watched.kill()
    watched.start()
    _roll(watched.client())
    _board_with(boards, "Spider-Man")
    assert statuses == ["Lost the daemon; reconnecting…"]

    hasty = follow(1.0, threading.Event())
    _board_with(boards, "Spider-Man")
    patient_over.set()  # the patient one stops at its next attempt, with the test's error
    assert watched.stop() == 0
    hasty.join(timeout=WAIT)
    patient.join(timeout=WAIT)
    assert not hasty.is_alive()
    assert not patient.is_alive()
    (gave_up,) = [e for e in ended if isinstance(e, GaveUp)]
    assert str(gave_up).startswith("the daemon stayed out of reach for 1 s (")
    assert str(gave_up).endswith("); giving up")


def test_watch_into_a_closed_pipe_ends_quietly_rather_than_reconnecting(watched: Daemon) -> None:
    done = into_a_closed_pipe("watch", "bank", "--socket", watched.socket)
    assert done.stderr == ""
    assert done.returncode == 128 + 13


def test_watch_warns_of_a_locale_it_does_not_speak_and_takes_a_token_secret(
    tmp_path: Path,
) -> None:
    with running(tmp_path, tcp=True) as d:
        add_spidey(d.client())
        secret = d.token("observer")
        args = ["watch", "bank", "--once", "--tcp", f"127.0.0.1:{d.tcp_port}", "--token", secret]
        french = turnkeeper(*args, "--locale", "fr")
        assert french.returncode == 0, french.stderr
        assert said(french.stderr) == [
            "turnkeeper: warning: no 'fr' translation (supported: en, pt-BR); using en"
        ]
        assert "bank (Marvel Multiverse RPG) — setup" in french.stdout
        portuguese = turnkeeper(*args, env={"TURNKEEPER_LOCALE": "pt"})
        assert (portuguese.returncode, portuguese.stderr) == (0, "")
        assert "bank (Marvel Multiverse RPG) — preparação" in portuguese.stdout


def test_watch_shows_a_note_for_a_custom_condition_delays_in_dnd3e_and_local_times(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        c = d.client()
        c.call(
            "create_combat",
            request_id="create",
            combat_id="keep",
            ruleset="dnd3e",
            options=[["turn_time_limit", 600]],
        )
        for cid, name, face in (("lidda", "Lidda", 16), ("tordek", "Tordek", 5)):
            c.call("add_combatant", request_id=cid, combat="keep", id=cid, display_name=name)
            c.call(
                "roll_initiative", request_id=f"r-{cid}", combat="keep", combatant=cid, faces=[face]
            )
        c.call("start_combat", request_id="start", combat="keep")
        c.call("hold", request_id="hold", combat="keep", turn={"round": 1, "combatant": "lidda"})
        c.call(
            "apply_condition",
            request_id="web",
            combat="keep",
            target="tordek",
            type="custom",
            note="Webbed to the wall.",
        )
        combat = c.call("get_combat", combat="keep")
    board = render(combat)
    assert "Lidda  (delayed)" in board
    assert "Tordek: Webbed to the wall." in board
    assert "holding" not in board
    assert "custom" not in board
    deadline = combat["view"]["turn"]["deadline"]
    local = time.strftime("%H:%M:%S", time.localtime(deadline))
    assert f"Turn ends at {local} (local time)" in board
    assert "epoch" not in board
    pt = render(combat, "pt-BR")
    assert "Lidda  (atrasado)" in pt
    assert "Tordek: Webbed to the wall." in pt


def test_the_board_names_the_bonus_round_once_and_the_ruleset_by_its_title() -> None:
    story = Story("marvel")
    for cid, faces in (("spidey", (5, 6, 1)), ("doom", (2, 2, 2))):  # M on the first: Fantastic
        story.add(cid)
        story.roll(cid, *faces)
    story.do(c.StartCombat())
    assert story.state.phase == "bonus_round"
    board = render({"view": to_plain(view(story.state, NARRATOR))})
    heading = board.splitlines()[0]
    assert heading.count("bonus round") == 1, heading
    assert "(Marvel Multiverse RPG)" in heading, heading
    story.end_turn()
    board = render({"view": to_plain(view(story.state, NARRATOR))})
    assert board.splitlines()[0].endswith("— round 1"), board


def test_an_ipv6_listen_address_is_written_in_brackets() -> None:
    assert _tcp("[::1]:7616") == ("::1", 7616)
    assert _tcp("127.0.0.1:7616") == ("127.0.0.1", 7616)


def test_a_line_naming_one_of_clis_own_commands_does_not_import_the_shell(tmp_path: Path) -> None:
    # The shell's verbs are only an alternative to cli's own commands: a daemon's start, whose
    # line says serve, has no use for their table (bench_startup.py).
    probe = (
        "import sys\n"
        "from turnkeeper import cli\n"
        "args = cli._arguments(sys.argv[1:])\n"
        "assert args.command == 'serve'\n"
        "print('turnkeeper.shell' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "serve", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_the_help_lists_every_command_and_an_alias_is_its_verb() -> None:
    listed = turnkeeper("--help")
    assert listed.returncode == 0, listed.stderr
    for name in ("serve", "token", "table", "watch", "show", "next"):
        assert f"    {name}" in listed.stdout
    alias = turnkeeper("end-turn", "--help")
    assert alias.returncode == 0, alias.stderr
    assert alias.stdout.startswith("usage: turnkeeper next")
    unknown = turnkeeper("bogus")
    assert unknown.returncode == 2
    assert "invalid choice: 'bogus'" in unknown.stderr
