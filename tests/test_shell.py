"""The protocol from the shell: the real ``turnkeeper`` executable against a live daemon, a whole
combat per ruleset from creation to end, as the narrator (Unix socket) and as a player (token,
over TCP and WebSocket)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import CALL_TIMEOUT, Daemon, free_port, running
from turnkeeper import shell
from turnkeeper.cli import EXIT_UNREACHABLE, Commands, _parser, main
from turnkeeper.shell import COMMAND_SETTINGS, EXIT_REFUSED, QUERIES, VERBS
from turnkeeper.wsclient import WebSocketSocket
from turnkeeper_engine.commands import COMMANDS
from turnkeeper_sdk import wire
from turnkeeper_sdk.client import Client

TURNKEEPER = Path(sys.executable).with_name("turnkeeper")
"""The console script ``pip install`` made, as a user runs it."""


class Shell:
    """``turnkeeper`` runs against one daemon, its socket given by the environment."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        self.env = env | {"TURNKEEPER_SOCKET": str(daemon.socket)}

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TURNKEEPER), *args],
            capture_output=True,
            text=True,
            env=self.env | env,
            timeout=CALL_TIMEOUT,
        )

    def ok(self, *args: str, **env: str) -> str:
        """Its output; the command must succeed."""
        done = self.run(*args, **env)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.ok(*args, "--json", **env))

    def refused(self, *args: str, **env: str) -> tuple[str, str]:
        """A refusal's code and field, read from ``--json``; the exit code must say refused."""
        done = self.run(*args, "--json", **env)
        assert done.returncode == EXIT_REFUSED, (args, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["message"]
        return error["code"], error["field"]

    def view(self, combat: str) -> Any:
        return self.json("show", combat)["view"]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with running(tmp_path, True, ws=True) as d:
        yield d


def _turn(shell: Shell, combat: str) -> tuple[str, str]:
    turn = shell.view(combat)["turn"]
    return turn["combatant"], turn["kind"]


def test_every_engine_command_has_one_verb() -> None:
    assert sorted(v.method for v in VERBS) == sorted(COMMANDS)


def test_a_marvel_combat_from_creation_to_end(daemon: Daemon) -> None:
    sh = Shell(daemon)
    player = daemon.token("player", "--user", "peter")
    as_peter = ("--connect", f"tcp://127.0.0.1:{daemon.tcp_port}", "--token", player)

    created = sh.json("create", "m1", "marvel", "--option", "turn_time_limit=600")
    assert created["combat"] == "m1"
    options = dict(created["events"][1]["options"])
    assert options["turn_time_limit"] == 600.0
    assert "Spider-Man joins." in sh.ok(
        "add", "m1", "spidey", "Spider-Man", "--pc", "--controller", "peter", "--mod", "2"
    )
    sh.ok("add", "m1", "doc", "Doc Ock")
    sh.ok("add", "m1", "thug")  # named by its id
    # The player rolls its own check with the dice it threw at the table; the narrator, the rest.
    assert "17" in sh.ok("roll", "m1", "spidey", "--faces", "5,4,6", *as_peter)
    sh.ok("roll", "m1", "doc", "--faces", "4,4,4")
    sh.ok("roll", "m1", "thug", "--faces", "3,3,3")
    assert "Spider-Man's turn begins." in sh.ok("start", "m1")
    board = sh.ok("show", "m1")
    assert board.index("Spider-Man") < board.index("Doc Ock") < board.index("thug")
    assert board.splitlines()[2].startswith(">")

    # A player acts for its own combatant.
    sh.ok("act", "m1", "attack", "--target", "thug", *as_peter)
    sh.ok("next", "m1", *as_peter)
    assert _turn(sh, "m1") == ("doc", "normal")

    # Doc Ock holds, says when to take the held turn, and takes it.
    assert "Doc Ock holds the turn." in sh.ok("hold", "m1")
    assert _turn(sh, "m1") == ("thug", "normal")
    sh.ok("take", "m1", "doc", "after", "thug")
    sh.ok("next", "m1")
    assert _turn(sh, "m1") == ("doc", "held")
    sh.ok("next", "m1")
    assert shown_round(sh, "m1") == 2

    # Spider-Man reserves an attack for when the thug moves; the window opens and he claims it.
    sh.ok("reserve", "m1", "attack", "Thug moves", "--on", "move", "--on-actor", "thug", *as_peter)
    sh.ok("next", "m1", *as_peter)
    assert _turn(sh, "m1") == ("thug", "normal")  # Doc Ock acts after him now
    assert "Reactions offered to Spider-Man" in sh.ok("act", "m1", "move")
    window = sh.view("m1")["window"]["id"]
    assert f"[{window}]" in sh.ok("show", "m1")
    sh.ok("claim", "m1", "spidey", *as_peter)  # the open window, with his reservation
    assert f"Reactions resolve in order: Spider-Man. [{window}]" in sh.ok("show", "m1")
    sh.ok("done", "m1", "spidey", *as_peter)
    assert "interrupts" in sh.ok("log", "m1")

    # A condition, removed, and the removal undone.
    applied = sh.json("condition", "m1", "thug", "Webbed to the wall", "--rounds", "2")
    condition = applied["events"][1]["condition"]["id"]
    assert f"Webbed to the wall (2 more end of thug's turn) [{condition}]" in sh.ok("show", "m1")
    sh.ok("uncondition", "m1", condition)
    assert "Webbed" not in sh.ok("show", "m1")
    sh.ok("undo", "m1")
    assert "Webbed" in sh.ok("show", "m1")

    assert "The combat is over" in sh.ok("end", "m1")
    assert sh.view("m1")["phase"] == "ended"
    assert sh.refused("next", "m1") == ("no_turn", "turn")


def shown_round(sh: Shell, combat: str) -> int:
    return int(sh.view(combat)["round"])


def test_a_dnd3e_combat_from_creation_to_end(daemon: Daemon) -> None:
    sh = Shell(daemon)
    ws = ("--connect", f"ws://127.0.0.1:{daemon.ws_port}/ws")
    narrator = daemon.token("narrator")

    sh.ok("begin", "d1", "dnd3e", "--option", "ready=3.5", "--option", "delay=3.5")
    sh.ok("add", "d1", "a", "Alice", "--mod", "2", "--dex", "14", "--faces", "15")
    sh.ok("add", "d1", "b", "Bandit", "--faces", "10")
    sh.ok("add", "d1", "c", "Cleric", "--faces", "5", "--hidden")
    sh.ok("start", "d1", *ws, TURNKEEPER_TOKEN=narrator)
    assert _turn(sh, "d1") == ("a", "normal")

    # Alice readies an attack for when Bandit moves; his move opens the window she claims.
    said = sh.ok("ready", "d1", "attack", "Bandit moves", "--on", "move", "--on-actor", "b")
    assert "Alice readies a standard action (attack)" in said
    sh.ok("next", "d1")
    assert "Reactions offered to Alice" in sh.ok("act", "d1", "move")
    sh.ok("claim", "d1", "a")
    sh.ok("finish", "d1", "a")
    assert [c["place"] for c in sh.view("d1")["combatants"]] == [10, 10, 5]
    sh.ok("reveal", "d1", "c")
    sh.ok("next", "d1")
    sh.ok("next", "d1")
    assert shown_round(sh, "d1") == 2

    # Alice delays until just after Bandit's turn.
    assert "delays" in sh.ok("hold", "d1")
    sh.ok("take", "d1", "a", "after", "b")
    sh.ok("next", "d1")
    assert _turn(sh, "d1") == ("a", "held")
    sh.ok("effect", "d1", "b", "Shaken", "--rounds", "1", "--anchor", "b")
    assert "Shaken" in sh.ok("show", "d1")
    sh.ok("undo", "d1")
    assert "Shaken" not in sh.ok("show", "d1")
    sh.ok("end", "d1")
    assert sh.view("d1")["phase"] == "ended"


def test_r16_a_player_token_is_refused_the_narrators_commands_from_the_shell(
    daemon: Daemon,
) -> None:
    sh = Shell(daemon)
    sh.ok("create", "c1", "marvel")
    sh.ok("add", "c1", "spidey", "--controller", "peter", "--faces", "5,4,6")
    sh.ok("add", "c1", "thug", "--faces", "2,2,2")
    peter = {"TURNKEEPER_TOKEN": daemon.token("player", "--user", "peter")}
    watcher = {"TURNKEEPER_TOKEN": daemon.token("observer")}
    tcp = ("--connect", f"tcp://127.0.0.1:{daemon.tcp_port}")
    ws = ("--connect", f"ws://127.0.0.1:{daemon.ws_port}")
    refused = sh.run("start", "c1", *tcp, **peter)
    assert refused.returncode == EXIT_REFUSED
    assert refused.stderr.startswith("turnkeeper: forbidden: ")
    assert refused.stderr.endswith(" (actor)\n")
    assert sh.refused("end", "c1", *ws, **peter) == ("forbidden", "actor")
    sh.ok("start", "c1")
    sh.ok("next", "c1", *ws, **peter)  # his own turn
    assert sh.refused("next", "c1", *tcp, **peter) == ("forbidden", "combatant")  # the thug's
    assert sh.refused("defeat", "c1", "thug", *tcp, **peter) == ("forbidden", "actor")
    assert sh.refused("undo", "c1", *tcp, **peter) == ("forbidden", "actor")
    assert sh.refused("next", "c1", *tcp, **watcher) == ("forbidden", "actor")
    # Reading is every role's; nothing refused was recorded.
    assert sh.json("show", "c1", *tcp, **watcher)["view"]["turn"]["combatant"] == "thug"
    assert "thug's turn begins." in sh.ok("log", "c1", *ws, **peter)


def test_r13_the_narrator_sets_and_turns_off_the_turn_timer_from_the_shell(
    daemon: Daemon,
) -> None:
    sh = Shell(daemon)
    sh.ok("create", "t1", "dnd3e", "--option", "turn_time_limit=600")
    sh.ok("add", "t1", "a", "Alice", "--faces", "15")
    sh.ok("add", "t1", "b", "Bandit", "--faces", "10")
    sh.ok("start", "t1")
    deadline = sh.view("t1")["turn"]["deadline"]

    # A new length is for the turns that start from now on: Alice's keeps its deadline.
    assert "Turn timer: 30 s a turn, from the next turn." in sh.ok("timer", "t1", "30")
    view = sh.view("t1")
    assert dict(view["options"])["turn_time_limit"] == 30.0
    assert view["turn"]["deadline"] == deadline
    assert "Turn timer: 30 s a turn" in sh.ok("show", "t1")
    started = sh.json("next", "t1")["events"]
    (bandit,) = [e for e in started if e["event"] == "turn_started"]
    assert bandit["deadline"] == pytest.approx(bandit["at"] + 30)

    # Off: the running turn's timer stops too.
    assert "The turn timer is off." in sh.ok("timer", "t1", "off")
    view = sh.view("t1")
    assert (dict(view["options"])["turn_time_limit"], view["turn"]["deadline"]) == (None, None)
    assert "Turn timer:" not in sh.ok("show", "t1")
    sh.ok("undo", "t1")
    assert sh.view("t1")["turn"]["deadline"] == bandit["deadline"]

    # Out of range: refused by the daemon, its field named; not a number: by the command line.
    seq = sh.json("show", "t1")["seq"]
    assert sh.refused("timer", "t1", "0") == ("invalid_value", "seconds")
    assert sh.refused("timer", "t1", "86401") == ("invalid_value", "seconds")
    assert sh.json("show", "t1")["seq"] == seq
    usage = sh.run("timer", "t1", "1.5")
    assert usage.returncode == 2
    assert "expected whole seconds, or off" in usage.stderr
    peter = {"TURNKEEPER_TOKEN": daemon.token("player", "--user", "peter")}
    tcp = ("--connect", f"tcp://127.0.0.1:{daemon.tcp_port}")
    assert sh.refused("timer", "t1", "off", *tcp, **peter) == ("forbidden", "actor")


def test_refusals_say_code_message_and_field_and_exit_non_zero(
    daemon: Daemon, tmp_path: Path
) -> None:
    sh = Shell(daemon)
    done = sh.run("add", "nowhere", "hero")
    assert done.returncode == EXIT_REFUSED
    assert done.stdout == ""
    assert done.stderr == "turnkeeper: unknown_combat: no combat 'nowhere' (combat)\n"
    # With --json the refusal is data, where the answer would have been.
    assert sh.refused("add", "nowhere", "hero") == ("unknown_combat", "combat")
    sh.ok("create", "c1", "marvel")
    assert sh.refused("create", "c1", "dnd3e") == ("combat_exists", "combat_id")
    assert sh.refused("create", "c2", "marvel", "--option", "ready=3.5") == (
        "unknown_option",
        "options.ready",
    )
    assert sh.refused("claim", "c1", "hero") == ("no_window", "window")
    # Nothing refused was recorded.
    assert [row["combat"] for row in sh.json("list")] == ["c1"]
    assert sh.json("show", "c1")["seq"] == 2

    made_up = sh.run("list", "--connect", f"tcp://127.0.0.1:{daemon.tcp_port}", "--token", "x")
    assert made_up.returncode == EXIT_REFUSED
    assert made_up.stderr.startswith("turnkeeper: unauthenticated: ")
    nobody = sh.run("list", "--socket", str(tmp_path / "none.sock"))
    assert nobody.returncode == EXIT_UNREACHABLE
    assert nobody.stderr.startswith(f"turnkeeper: cannot connect to {tmp_path / 'none.sock'}: ")
    usage = sh.run("list", "--connect", "http://127.0.0.1:1")
    assert usage.returncode == 2
    assert "expected unix:PATH, tcp://HOST:PORT or ws://HOST:PORT[/PATH]" in usage.stderr
    assert sh.run("next").returncode == 2  # no combat named


def test_json_is_the_daemons_answer_and_a_request_id_applies_once(daemon: Daemon) -> None:
    sh = Shell(daemon)
    created = sh.json("create", "c1", "marvel", "--request-id", "make-c1")
    assert [e["event"] for e in created["events"]] == ["command_recorded", "combat_created"]
    assert all("summary" not in e for e in created["events"])  # data, not narration
    again = sh.json("create", "c1", "marvel", "--request-id", "make-c1")
    assert again == created  # the daemon answers a request id it has seen as it did the first time
    shown = sh.json("show", "c1")
    assert shown["combat"] == "c1"
    assert shown["view"]["phase"] == "setup"
    rows = sh.json("list")
    assert rows == [
        {"combat": "c1", "ruleset": "marvel", "phase": "setup", "round": None, "seq": 2}
    ]
    assert [e["event"] for e in sh.json("log", "c1")] == ["command_recorded", "combat_created"]


def test_the_shell_speaks_the_chosen_language(daemon: Daemon) -> None:
    sh = Shell(daemon)
    sh.ok("create", "c1", "marvel")
    sh.ok("add", "c1", "hero", "Hero", "--faces", "3,3,3")
    assert "Hero começa o turno." in sh.ok("start", "c1", "--locale", "pt-BR")
    assert (
        "Nenhuma janela de reação está aberta."
        in sh.run("pass", "c1", "hero", TURNKEEPER_LOCALE="pt-BR").stderr
    )
    assert "rodada 1" in sh.ok("list", "--locale", "pt-BR")


def test_the_sdk_client_makes_a_request_id_when_none_is_given(daemon: Daemon) -> None:
    """The first call a newcomer writes: a command, no request id."""
    with Client.unix(daemon.socket) as client:
        client.hello()
        first = client.call("create_combat", combat_id="c1", ruleset="marvel")
        second = client.call("add_combatant", combat="c1", id="hero", display_name="Hero")
    assert first["seq"] == 2
    assert second["seq"] == 4  # a fresh id each: the second is a command of its own


def _sections(page: str) -> dict[str, str]:
    """Each ``### `a`, `b``` section of a page, by every name its heading gives."""
    sections: dict[str, str] = {}
    for chunk in page.split("\n### ")[1:]:
        heading, _, body = chunk.partition("\n")
        for name in re.findall(r"`([^`]+)`", heading):
            sections[name] = body
    return sections


def test_docs_shell_md_has_every_subcommand_with_its_aliases_and_flags() -> None:
    sections = _sections((Path(__file__).parents[1] / "docs" / "shell.md").read_text())
    common = {f for s in COMMAND_SETTINGS for f in s.flags} | {"-h", "--help"}
    commands = next(a for a in _parser()._actions if isinstance(a, Commands))
    for name in [v.name for v in VERBS] + list(QUERIES):
        assert name in sections, f"docs/shell.md has no section for {name}"
        body = sections[name]
        verb = next((v for v in VERBS if v.name == name), None)
        for alias in verb.aliases if verb else ():
            assert f"`{alias}`" in body, f"docs/shell.md: {name} does not name its alias {alias}"
        for action in commands.parser(name)._actions:
            for flag in set(action.option_strings) - common:
                assert flag in body, f"docs/shell.md: {name} does not document {flag}"


def test_a_connection_lost_before_the_answer_names_the_request_id_to_retry(
    tmp_path: Path,
) -> None:
    """A daemon that goes away mid-command (here a socket that answers hello, then hangs up on
    the command): the command may have been applied, so the shell says which id to send again,
    and a retry with it is applied once by a real daemon."""
    path = tmp_path / "gone.sock"
    seen: list[wire.Request] = []
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        server.settimeout(CALL_TIMEOUT)

        def answer_hello_then_hang_up() -> None:
            conn, _ = server.accept()
            with conn:
                decoder = wire.Decoder()
                while len(seen) < 2:
                    data = conn.recv(65536)
                    if not data:
                        return
                    for message in decoder.feed(data):
                        assert isinstance(message, wire.Request)
                        seen.append(message)
                        if message.method == "hello":
                            conn.sendall(wire.pack(wire.Response(message.msgid, None, {})))

        thread = threading.Thread(target=answer_hello_then_hang_up, daemon=True)
        thread.start()
        done = subprocess.run(
            [str(TURNKEEPER), "create", "c1", "marvel", "--socket", str(path)],
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT,
        )
        thread.join(CALL_TIMEOUT)
    assert done.returncode == EXIT_UNREACHABLE
    request_id = seen[1].params["request_id"]
    assert done.stderr.startswith("turnkeeper: lost the daemon before its answer")
    assert f"--request-id {request_id}" in done.stderr

    (tmp_path / "daemon").mkdir()
    with running(tmp_path / "daemon") as d:
        sh = Shell(d)
        first = sh.json("create", "c1", "marvel", "--request-id", request_id)
        again = sh.json("create", "c1", "marvel", "--request-id", request_id)
        assert again == first


@contextlib.contextmanager
def answer_lost(daemon: Daemon, path: Path, method: str) -> Iterator[list[wire.Response]]:
    """A Unix socket at ``path`` that passes one connection through to the daemon, until the
    daemon answers ``method``: that answer it keeps (in the list it yields) and hangs up
    instead. So the daemon applies the command, and the shell never hears that it did."""
    kept: list[wire.Response] = []
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        server.settimeout(CALL_TIMEOUT)

        def pass_through() -> None:
            conn, _ = server.accept()
            with conn, socket.socket(socket.AF_UNIX) as upstream:
                conn.settimeout(CALL_TIMEOUT)
                upstream.settimeout(CALL_TIMEOUT)
                upstream.connect(str(daemon.socket))
                asked, answers = wire.Decoder(), wire.Decoder()
                while data := conn.recv(65536):
                    for request in asked.feed(data):
                        assert isinstance(request, wire.Request)
                        upstream.sendall(wire.pack(request))
                        answer: list[Any] = []
                        while not answer:
                            answer = answers.feed(upstream.recv(65536))
                        (response,) = answer
                        assert isinstance(response, wire.Response)
                        if request.method == method:
                            kept.append(response)
                            return
                        conn.sendall(wire.pack(response))

        thread = threading.Thread(target=pass_through, daemon=True)
        thread.start()
        yield kept
        thread.join(CALL_TIMEOUT)


def _lost(sh: Shell, path: Path, method: str, *args: str) -> tuple[list[str], dict[str, Any]]:
    """Run ``args`` through ``answer_lost``: the retry command line the shell prints, and the
    answer it never got. With ``--json`` the retry comes as data, else in the message."""
    with answer_lost(sh.daemon, path, method) as kept:
        done = sh.run(*args, TURNKEEPER_SOCKET=str(path))
    assert done.returncode == EXIT_UNREACHABLE, (done.stdout, done.stderr)
    (answer,) = kept
    assert answer.error is None
    if "--json" in args:
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "connection_lost"
        assert error["message"].startswith("lost the daemon before its answer")
        assert error["retry"][error["retry"].index("--request-id") + 1] == error["request_id"]
        return error["retry"], answer.result
    assert done.stderr.startswith("turnkeeper: lost the daemon before its answer")
    retry = shlex.split(done.stderr.partition(" send it again as ")[2].partition(" (the")[0])
    return retry, answer.result


def test_a_lost_answer_is_retried_with_the_printed_command_and_applied_once(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The retry names the values the shell filled in from the combat (the turn, the window),
    so it is the same command even though the combat has moved on: the daemon answers it as
    it did the first time rather than ending another turn or refusing the id."""
    sh = Shell(daemon)
    sh.ok("create", "c1", "marvel")
    sh.ok("add", "c1", "spidey", "--faces", "5,4,6")
    sh.ok("add", "c1", "thug", "--faces", "2,2,2")
    sh.ok("start", "c1")
    seq = sh.json("show", "c1")["seq"]

    retry, answer = _lost(sh, tmp_path / "a.sock", "end_turn", "next", "c1")
    assert retry[:3] == ["turnkeeper", "next", "c1"]
    assert retry[retry.index("--turn") + 1] == "1:spidey:1"
    assert _turn(sh, "c1") == ("thug", "normal")  # applied, though the shell never heard
    told = [e["summary"] for e in answer["events"] if e.get("summary")]
    assert told == ["  thug's turn begins."]
    assert sh.ok(*retry[1:]).splitlines() == told
    assert sh.ok(*retry[1:]).splitlines() == told
    assert _turn(sh, "c1") == ("thug", "normal")  # and applied once
    assert sh.json("show", "c1")["seq"] == answer["seq"] > seq

    sh.ok("trigger", "c1", "move", "--actor", "thug", "--offer", "spidey")
    window = sh.view("c1")["window"]["id"]
    retry, answer = _lost(sh, tmp_path / "b.sock", "close_window", "close", "c1", "--json")
    assert retry[retry.index("--window") + 1] == window
    assert sh.view("c1")["window"] is None
    # No window is open any more: the retry names the one it closed, and reaches the daemon.
    assert sh.json(*retry[1:]) == answer


def test_a_retry_gives_its_request_id_and_turn_and_gets_the_first_answer(daemon: Daemon) -> None:
    sh = Shell(daemon)
    sh.ok("create", "c1", "marvel")
    sh.ok("add", "c1", "spidey", "--faces", "5,4,6")
    sh.ok("add", "c1", "thug", "--faces", "2,2,2")
    sh.ok("start", "c1")
    first = sh.json("next", "c1", "--request-id", "n1", "--turn", "1:spidey:1")
    assert sh.json("next", "c1", "--request-id", "n1", "--turn", "1:spidey:1") == first
    # Without the turn the shell names the current one, another command: the id is refused.
    assert sh.refused("next", "c1", "--request-id", "n1") == ("request_id_reused", "request_id")
    # A turn given that has passed is the daemon's to refuse.
    assert sh.refused("next", "c1", "--turn", "1:spidey:1") == ("stale_turn", "turn")
    usage = sh.run("next", "c1", "--turn", "spidey")
    assert usage.returncode == 2
    assert "expected ROUND:COMBATANT:NUMBER" in usage.stderr
    assert _turn(sh, "c1") == ("thug", "normal")


def test_with_json_an_unreachable_daemon_is_an_error_on_standard_output(tmp_path: Path) -> None:
    sh = Shell(Daemon(tmp_path))  # never started: nothing listens on its socket
    done = sh.run("list", "--json")
    assert done.returncode == EXIT_UNREACHABLE
    assert done.stderr == ""
    error = json.loads(done.stdout)["error"]
    assert (error["code"], error["field"]) == ("unreachable", "")
    assert error["message"].startswith(f"cannot connect to {sh.daemon.socket}: ")


def test_watch_connects_as_the_shell_does_and_says_unreachable_as_it_does(
    daemon: Daemon, tmp_path: Path
) -> None:
    sh = Shell(daemon)
    sh.ok("create", "c1", "marvel")
    observer = {"TURNKEEPER_TOKEN": daemon.token("observer")}
    ws = f"ws://127.0.0.1:{daemon.ws_port}"
    board = sh.ok("watch", "c1", "--once", "--connect", ws, **observer)
    assert board.startswith("c1 (Marvel Multiverse RPG)")
    tcp = sh.ok("watch", "c1", "--once", "--tcp", f"127.0.0.1:{daemon.tcp_port}", **observer)
    assert tcp == board
    nobody = sh.run("watch", "c1", "--socket", str(tmp_path / "none.sock"))
    assert nobody.returncode == EXIT_UNREACHABLE
    assert nobody.stderr.startswith(f"turnkeeper: cannot connect to {tmp_path / 'none.sock'}: ")


def test_log_prints_each_page_before_asking_for_the_next(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bounded memory: a page is printed, then dropped, before the next is read."""
    sh = Shell(daemon)
    sh.ok("create", "c1", "marvel")
    for name in ("a", "b", "c"):
        sh.ok("add", "c1", name)
    monkeypatch.setattr(shell, "HISTORY_PAGE", 2)
    printed_before: list[str] = []
    call = Client.call

    def call_and_look(self: Client, method: str, /, **params: Any) -> Any:
        if method == "history":
            printed_before.append(capsys.readouterr().out)
        return call(self, method, **params)

    monkeypatch.setattr(Client, "call", call_and_look)
    assert main(["log", "c1", "--socket", str(daemon.socket)]) == 0
    printed_before.append(capsys.readouterr().out)
    assert printed_before[0] == ""
    assert printed_before[1] == "== Combat 'c1' (Marvel Multiverse RPG) ==\n"
    assert "".join(printed_before).splitlines()[1:] == ["a joins.", "b joins.", "c joins."]
    assert len(printed_before) == 5  # four pages of two events, and what the last printed

    monkeypatch.setattr(Client, "call", call)
    assert main(["log", "c1", "--json", "--socket", str(daemon.socket)]) == 0
    listed = capsys.readouterr().out
    events = json.loads(listed)
    assert len(events) == 8
    assert listed == json.dumps(events, ensure_ascii=False, indent=2) + "\n"


def test_a_websocket_to_an_ipv6_address_brackets_it_in_the_host_header(tmp_path: Path) -> None:
    heard: list[bytes] = []
    with socket.socket(socket.AF_INET6) as server:
        server.bind(("::1", 0))
        server.listen()
        server.settimeout(CALL_TIMEOUT)
        port = server.getsockname()[1]

        def hear_the_upgrade_and_refuse_it() -> None:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(CALL_TIMEOUT)
                while not b"".join(heard).endswith(b"\r\n\r\n"):
                    heard.append(conn.recv(65536))
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

        thread = threading.Thread(target=hear_the_upgrade_and_refuse_it, daemon=True)
        thread.start()
        with pytest.raises(ConnectionRefusedError):
            WebSocketSocket("::1", port, timeout=CALL_TIMEOUT)
        thread.join(CALL_TIMEOUT)
    headers = b"".join(heard).decode().split("\r\n")
    assert f"host: [::1]:{port}" in [h.lower() for h in headers]

    # A daemon listening there is reached so.
    port = free_port()
    with running(tmp_path, False, "--ws", f"[::1]:{port}") as d:
        narrator = {"TURNKEEPER_TOKEN": d.token("narrator")}
        sh = Shell(d)
        sh.ok("create", "c1", "marvel", "--connect", f"ws://[::1]:{port}", **narrator)
        assert sh.view("c1")["phase"] == "setup"


def test_a_retry_line_does_not_show_a_token_given_on_the_command_line() -> None:
    """The retry is printed where secrets should not go; without its token it fails on hello
    instead of running as another principal (which would apply the command twice)."""
    retry = shell._retry(
        shlex.split("next c1 --token s3cret --connect=tcp://h:1 --token=s3cret -- --token x"),
        ["--turn", "1:a:1"],
    )
    assert "s3cret" not in " ".join(retry)
    assert retry == [
        "turnkeeper", "next", "c1", "--token", shell.SECRET, "--connect=tcp://h:1",
        f"--token={shell.SECRET}", "--turn", "1:a:1", "--", "--token", "x",
    ]  # fmt: skip
