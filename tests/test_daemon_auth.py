"""R16 over the wire: tokens made with the real CLI, sessions over a real socket, and the
permission rules, hidden combatants and request ids as a real daemon applies them. Every test
runs twice: with the token sessions over TCP, then over the WebSocket endpoint."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, running
from turnkeeper_engine.decide import MAX_COMBATANTS, MAX_ITEMS, MAX_NAME, MAX_VIEW_BYTES
from turnkeeper_sdk import wire

FACES = {"ann": [6, 6, 5], "bob": [6, 5, 5], "cat": [5, 5, 5], "ogre": [4, 4, 4]}
"""marvel, no Fantastic (so no bonus round): ann 17, bob 16, cat 15, ogre 12."""
CONTROLLERS = {"ann": "u1", "bob": "u2", "cat": "u1", "ogre": None}
"""ann and cat are u1's, bob is u2's, the ogre is the narrator's."""
SUBJECTS = {"own": "ann", "other_player": "bob", "narrator_run": "ogre"}
"""Whose combatant the command acts for, from the point of view of user u1."""


def token_cli(d: Daemon, *args: str) -> str:
    """``turnkeeper token ARGS`` against the daemon's data directory; returns stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", "token", "--data-dir", str(d.data_dir), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    return done.stdout


@dataclass
class Table:
    """One daemon with a token per role and a live session for each."""

    daemon: Daemon
    secrets: dict[str, str]
    gm: Client
    """The Unix peer with the daemon's own uid: a narrator without a token. Sets the scene."""
    transport: str = "tcp"
    """How token sessions connect: ``tcp`` or ``ws``."""
    sessions: dict[str, Client] = field(default_factory=dict)
    ids: Iterator[int] = field(default_factory=itertools.count)

    def open(self) -> Client:
        """A new connection that has not said hello, over the table's transport."""
        if self.transport == "ws":
            assert self.daemon.ws_port is not None
            return Client.ws(self.daemon.ws_port)
        assert self.daemon.tcp_port is not None
        return Client.tcp(self.daemon.tcp_port)

    def connect(self, role: str) -> Client:
        c = self.open()
        c.hello(self.secrets[role])
        return c

    def combat_id(self, name: str) -> str:
        return f"{name}-{next(self.ids)}"


@pytest.fixture(scope="module", params=["tcp", "ws"])
def table(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Table]:
    with running(tmp_path_factory.mktemp("auth"), tcp=True, ws=True) as d:
        secrets = {
            "narrator": d.token("narrator"),
            "player": d.token("player", "--user", "u1"),
            "player_u2": d.token("player", "--user", "u2"),
            "observer": d.token("observer"),
            "bridge": d.token("bridge"),
            "bridge_narrator": d.token("bridge", "--narrator"),
        }
        t = Table(d, secrets, d.client(), request.param)
        t.sessions = {role: t.connect(role) for role in secrets}
        yield t


class Scene:
    """One combat, set up by the narrator through the daemon."""

    def __init__(self, t: Table, name: str) -> None:
        self.gm = t.gm
        self.combat = t.combat_id(name)
        self.requests = itertools.count()

    def do(self, method: str, **params: Any) -> Any:
        return self.gm.call(
            method, combat=self.combat, request_id=f"{self.combat}:{next(self.requests)}", **params
        )

    def create(self, **options: Any) -> None:
        self.gm.call(
            "create_combat",
            request_id=f"create-{self.combat}",
            combat_id=self.combat,
            ruleset="marvel",
            options=[[k, v] for k, v in options.items()],
        )

    def added(self, *, rolled: bool = False) -> Scene:
        self.create()
        for cid, user in CONTROLLERS.items():
            self.do(
                "add_combatant",
                id=cid,
                display_name=cid.title(),
                controller=user,
                player_character=user is not None,
            )
            if rolled:
                self.do("roll_initiative", combatant=cid, faces=FACES[cid])
        return self

    def started(self) -> Scene:
        self.added(rolled=True)
        self.do("start_combat")
        assert self.view()["order"] == ["ann", "bob", "cat", "ogre"]
        return self

    def view(self) -> Any:
        return self.gm.call("get_combat", combat=self.combat)["view"]

    def seq(self) -> int:
        return int(self.gm.call("get_combat", combat=self.combat)["seq"])

    def turn(self) -> dict[str, Any]:
        turn = self.view()["turn"]
        return {"round": turn["round"], "combatant": turn["combatant"]}

    def turn_of(self, who: str) -> dict[str, Any]:
        while (turn := self.turn())["combatant"] != who:
            self.do("end_turn", turn=turn)
        return turn

    def window_offering(self, who: str) -> str:
        done = self.do("announce_trigger", facts={"event": "explosion"}, offer=[who])
        (opened,) = [e for e in done["events"] if e["event"] == "window_opened"]
        return str(opened["window"]["id"])


# Each builder sets the scene as the narrator and returns the params of the command that acts
# for combatant ``x`` (R16's player commands: the same list as the engine's matrix).
Builder = Callable[[Scene, str], dict[str, Any]]


def _roll(s: Scene, x: str) -> dict[str, Any]:
    s.added()
    return {"combatant": x, "faces": [3, 3, 3]}


def _order_ties(s: Scene, x: str) -> dict[str, Any]:
    s.added()
    return {"combatants": ["cat", x]}


def _end_turn(s: Scene, x: str) -> dict[str, Any]:
    return {"turn": s.started().turn_of(x)}


def _declare(s: Scene, x: str) -> dict[str, Any]:
    return {"turn": s.started().turn_of(x), "action": {"kind": "move"}}


def _hold(s: Scene, x: str) -> dict[str, Any]:
    return {"turn": s.started().turn_of(x)}


def _reserve(s: Scene, x: str) -> dict[str, Any]:
    return {
        "turn": s.started().turn_of(x),
        "reserved_type": "standard",
        "action": {"kind": "attack"},
        "trigger": {"text": "it moves"},
    }


def _take_held(s: Scene, x: str) -> dict[str, Any]:
    s.started().do("hold", turn=s.turn_of(x))
    return {"combatant": x, "when": "after", "other": s.turn()["combatant"]}


def _claim(s: Scene, x: str) -> dict[str, Any]:
    window = s.started().window_offering(x)
    return {"window": window, "combatant": x, "action": {"kind": "attack"}}


def _pass(s: Scene, x: str) -> dict[str, Any]:
    return {"window": s.started().window_offering(x), "combatant": x}


def _finish(s: Scene, x: str) -> dict[str, Any]:
    window = s.started().window_offering(x)
    s.do("claim_reaction", window=window, combatant=x, action={"kind": "attack"})
    assert s.view()["window"]["status"] == "resolving"
    return {"window": window, "combatant": x}


PLAYER_COMMANDS: dict[str, Builder] = {
    "roll_initiative": _roll,
    "order_ties": _order_ties,
    "end_turn": _end_turn,
    "declare_action": _declare,
    "hold": _hold,
    "reserve": _reserve,
    "take_held_turn": _take_held,
    "claim_reaction": _claim,
    "pass_reaction": _pass,
    "finish_reaction": _finish,
}

# The narrator-only commands (the engine's ``_NARRATOR_ONLY``), each in a scene where the
# narrator may issue it.
NarratorBuilder = Callable[[Scene], dict[str, Any]]


def _defeated(s: Scene) -> dict[str, Any]:
    s.added().do("defeat_combatant", combatant="ann")
    return {"combatant": "ann"}


def _hidden(s: Scene) -> dict[str, Any]:
    s.added().do("add_combatant", id="lurker", display_name="Lurker", hidden=True)
    return {"combatant": "lurker"}


def _grouped(s: Scene) -> dict[str, Any]:
    s.create()
    for cid in ("g1", "g2"):
        s.do("add_combatant", id=cid, display_name=cid, group="g")
    return {"group": "g", "combatants": ["g2", "g1"]}


def _window(s: Scene) -> dict[str, Any]:
    return {"window": s.started().window_offering("ann")}


def _condition(s: Scene) -> dict[str, Any]:
    done = s.started().do("apply_condition", target="ann", type="custom", source="ann")
    (applied,) = [e for e in done["events"] if e["event"] == "condition_applied"]
    return {"condition": applied["condition"]["id"]}


def _in_setup(params: dict[str, Any]) -> NarratorBuilder:
    def build(s: Scene) -> dict[str, Any]:
        s.added()
        return params

    return build


def _in_rounds(params: dict[str, Any]) -> NarratorBuilder:
    def build(s: Scene) -> dict[str, Any]:
        s.started()
        return params

    return build


def _rolled(s: Scene) -> dict[str, Any]:
    s.added(rolled=True)
    return {}


NARRATOR_COMMANDS: dict[str, NarratorBuilder] = {
    "add_combatant": _in_setup(
        {"id": "dan", "display_name": "Dan", "controller": "u1", "player_character": True}
    ),
    "remove_combatant": _in_setup({"combatant": "ann"}),
    "defeat_combatant": _in_setup({"combatant": "ann"}),
    "revive_combatant": _defeated,
    "reveal_combatant": _hidden,
    "mark_surprised": _in_setup({"combatant": "ogre"}),
    "reorder_group": _grouped,
    "start_combat": _rolled,
    "announce_trigger": _in_rounds({"facts": {"event": "shout"}, "offer": ["ann"]}),
    "close_window": _window,
    "apply_condition": _in_rounds({"target": "ann", "type": "custom", "source": "ann"}),
    "remove_condition": _condition,
    "surprise": _in_rounds({"target": "bob", "by": ["ann"]}),
    "set_turn_timer": _in_rounds({"seconds": 30}),
    "tick": _in_rounds({}),
    "undo": _in_rounds({}),
    "end_combat": _in_rounds({}),
}


@dataclass(frozen=True)
class Caller:
    """A session and the ``as`` it puts on commands; ``recorded`` is the actor the engine
    records, as far as the test can know it (a bridge's ``via`` names its token id)."""

    session: str
    as_user: str | None
    role: str
    user: str | None
    via_bridge: bool


CALLERS = {
    "narrator": Caller("narrator", None, "narrator", None, False),
    "player": Caller("player", None, "player", "u1", False),
    "observer": Caller("observer", None, "observer", None, False),
    "bridge_as_u1": Caller("bridge", "u1", "player", "u1", True),
    "bridge_narrator": Caller("bridge_narrator", None, "narrator", None, True),
}


def issue(t: Table, caller: Caller, combat: str, method: str, params: dict[str, Any]) -> Any:
    extra = {"as": caller.as_user} if caller.as_user is not None else {}
    return t.sessions[caller.session].call(
        method, combat=combat, request_id=f"{method}-{combat}", **params, **extra
    )


def assert_applied(result: Any, caller: Caller, method: str, seq_before: int) -> None:
    assert result["seq"] > seq_before
    recorded = result["events"][0]
    assert (recorded["event"], recorded["command"]) == ("command_recorded", method)
    actor = recorded["actor"]
    assert (actor["role"], actor["user"]) == (caller.role, caller.user)
    if caller.via_bridge:
        assert str(actor["via"]).startswith("bridge:token:")
    else:
        assert actor["via"] is None


@pytest.mark.parametrize("caller_name", list(CALLERS))
@pytest.mark.parametrize("subject", list(SUBJECTS))
@pytest.mark.parametrize("method", list(PLAYER_COMMANDS))
def test_r16_wire_matrix_role_command_combatant(
    table: Table, caller_name: str, subject: str, method: str
) -> None:
    caller = CALLERS[caller_name]
    scene = Scene(table, f"m-{method}-{subject}-{caller_name}")
    params = PLAYER_COMMANDS[method](scene, SUBJECTS[subject])
    before = scene.seq()
    allowed = caller.role == "narrator" or (caller.role == "player" and subject == "own")
    if allowed:
        result = issue(table, caller, scene.combat, method, params)
        assert_applied(result, caller, method, before)
        assert scene.seq() == result["seq"]
        return
    with pytest.raises(CallError) as refused:
        issue(table, caller, scene.combat, method, params)
    expected_field = "actor" if caller.role == "observer" else "combatant"
    assert (refused.value.code, refused.value.field) == ("forbidden", expected_field)
    assert scene.seq() == before


@pytest.mark.parametrize("caller_name", list(CALLERS))
@pytest.mark.parametrize("method", list(NARRATOR_COMMANDS))
def test_r16_wire_narrator_only_commands(table: Table, caller_name: str, method: str) -> None:
    caller = CALLERS[caller_name]
    scene = Scene(table, f"n-{method}-{caller_name}")
    params = NARRATOR_COMMANDS[method](scene)
    before = scene.seq()
    if caller.role == "narrator":
        result = issue(table, caller, scene.combat, method, params)
        if method == "tick":
            # Nothing is due: a tick that changes nothing is not recorded.
            assert (result["seq"], result["events"]) == (before, [])
        else:
            assert_applied(result, caller, method, before)
        return
    with pytest.raises(CallError) as refused:
        issue(table, caller, scene.combat, method, params)
    assert (refused.value.code, refused.value.field) == ("forbidden", "actor")
    assert scene.seq() == before


@pytest.mark.parametrize("caller_name", list(CALLERS))
def test_r16_wire_only_a_narrator_creates_a_combat(table: Table, caller_name: str) -> None:
    caller = CALLERS[caller_name]
    combat = table.combat_id(f"create-{caller_name}")
    extra = {"as": caller.as_user} if caller.as_user is not None else {}
    session = table.sessions[caller.session]
    call = lambda: session.call(  # noqa: E731
        "create_combat", request_id=combat, combat_id=combat, ruleset="marvel", **extra
    )
    if caller.role == "narrator":
        assert call()["seq"] == 2
        assert table.gm.call("get_combat", combat=combat)["view"]["phase"] == "setup"
        return
    with pytest.raises(CallError) as refused:
        call()
    assert (refused.value.code, refused.value.field) == ("forbidden", "actor")
    assert combat not in {row["combat"] for row in table.gm.call("list_combats")}


@pytest.mark.parametrize("session", ["narrator", "player", "observer"])
@pytest.mark.parametrize("method", ["end_turn", "start_combat"])
def test_r16_wire_as_from_anyone_but_a_bridge_is_forbidden(
    table: Table, session: str, method: str
) -> None:
    scene = Scene(table, f"as-{session}-{method}").started()
    params = {"turn": scene.turn()} if method == "end_turn" else {}
    before = scene.seq()
    with pytest.raises(CallError) as refused:
        table.sessions[session].call(
            method, combat=scene.combat, request_id="as", **{"as": "u1"}, **params
        )
    assert (refused.value.code, refused.value.field) == ("forbidden", "as")
    assert scene.seq() == before


@pytest.mark.parametrize("method", ["end_turn", "start_combat", "tick"])
def test_r16_wire_a_bridge_names_the_user_it_acts_for(table: Table, method: str) -> None:
    scene = Scene(table, f"bridge-no-as-{method}").started()
    params = {"turn": scene.turn()} if method == "end_turn" else {}
    before = scene.seq()
    with pytest.raises(CallError) as refused:
        table.sessions["bridge"].call(method, combat=scene.combat, request_id="x", **params)
    assert (refused.value.code, refused.value.field) == ("as_user_required", "as")
    assert scene.seq() == before


def test_r16_wire_a_bridge_acts_for_each_named_user_within_their_rights(table: Table) -> None:
    scene = Scene(table, "bridge-users").started()
    bridge = table.sessions["bridge"]
    first = scene.turn()
    with pytest.raises(CallError) as refused:
        bridge.call(
            "end_turn", combat=scene.combat, request_id="u2-ann", turn=first, **{"as": "u2"}
        )
    assert (refused.value.code, refused.value.field) == ("forbidden", "combatant")
    bridge.call("end_turn", combat=scene.combat, request_id="u1-ann", turn=first, **{"as": "u1"})
    assert scene.turn()["combatant"] == "bob"
    bridge.call(
        "end_turn", combat=scene.combat, request_id="u2-bob", turn=scene.turn(), **{"as": "u2"}
    )
    assert scene.turn()["combatant"] == "cat"


QUERIES = ["get_combat", "history", "subscribe", "unsubscribe", "list_combats"]


@pytest.mark.parametrize("session", ["narrator", "player", "observer", "bridge", "bridge_narrator"])
def test_r16_wire_every_role_may_read(table: Table, session: str) -> None:
    scene = Scene(table, f"read-{session}").started()
    reader = table.connect(session)
    try:
        seq = scene.seq()
        assert reader.call("get_combat", combat=scene.combat)["seq"] == seq
        history = reader.call("history", combat=scene.combat)
        assert history["seq"] == seq
        assert history["events"][0]["event"] == "command_recorded"
        assert reader.call("subscribe", combat=scene.combat, after=seq)["seq"] == seq
        assert reader.call("unsubscribe", combat=scene.combat) == {"combat": scene.combat}
        assert scene.combat in {row["combat"] for row in reader.call("list_combats")}
    finally:
        reader.close()


def test_r16_a_unix_peer_with_a_token_has_the_tokens_role(table: Table) -> None:
    scene = Scene(table, "unix-token").started()
    c = Client.unix(table.daemon.socket)
    try:
        session = c.hello(table.secrets["player"])["session"]
        assert (session["role"], session["user"]) == ("player", "u1")
        before = scene.seq()
        with pytest.raises(CallError) as refused:
            c.call("end_combat", combat=scene.combat, request_id="end")
        assert (refused.value.code, refused.value.field) == ("forbidden", "actor")
        c.call("end_turn", combat=scene.combat, request_id="ann", turn=scene.turn())
        assert scene.seq() > before
    finally:
        c.close()


def test_r16_each_token_says_who_it_is_at_hello(table: Table) -> None:
    expected = {
        "narrator": ("narrator", None),
        "player": ("player", "u1"),
        "player_u2": ("player", "u2"),
        "observer": ("observer", None),
        "bridge": ("bridge", None),
        "bridge_narrator": ("bridge", None),
    }
    for role, (name, user) in expected.items():
        c = table.open()
        try:
            session = c.hello(table.secrets[role])["session"]
            assert (session["role"], session["user"]) == (name, user), role
        finally:
            c.close()


def test_r16_a_revoked_token_is_refused_at_the_next_hello(table: Table) -> None:
    d = table.daemon
    before = set(token_cli(d, "list").split())
    secret = d.token("player", "--user", "u9")
    (line,) = [x for x in token_cli(d, "list").splitlines() if x.split()[0] not in before]
    token_id, role, user = line.split()
    assert (role, user) == ("player", "u9")
    c = table.open()
    assert c.hello(secret)["session"]["user"] == "u9"
    c.close()
    token_cli(d, "revoke", token_id)
    again = table.open()
    try:
        with pytest.raises(CallError) as refused:
            again.hello(secret)
        assert (refused.value.code, refused.value.field) == ("unauthenticated", "token")
        with pytest.raises(CallError) as refused:
            again.call("list_combats")
        assert refused.value.code == "hello_required"
    finally:
        again.close()


def test_r16_revoking_a_token_ends_its_sessions_that_only_listen(table: Table) -> None:
    d = table.daemon
    before = set(token_cli(d, "list").split())
    secret = d.token("observer")
    (line,) = [x for x in token_cli(d, "list").splitlines() if x.split()[0] not in before]
    combat = table.combat_id("revoked")
    table.gm.call("create_combat", request_id=combat, combat_id=combat, ruleset="marvel")
    listener = table.open()
    try:
        listener.hello(secret)
        listener.call("subscribe", combat=combat)
        token_cli(d, "revoke", line.split()[0])
        # The listener sends nothing more: the daemon must end the session by itself, within
        # TOKEN_CHECK_SECONDS (the timeout is generous for a loaded machine).
        listener.sock.settimeout(5.0)
        seen = []
        with contextlib.suppress(EOFError, ConnectionResetError):
            while True:
                seen.append(listener.notification())
        final = seen[-1]
        assert (final.method, final.params["code"], final.params["fatal"]) == (
            "error",
            "token_revoked",
            True,
        )
    finally:
        listener.close()


def test_r16_tcp_and_websocket_refuse_a_made_up_token(table: Table) -> None:
    c = table.open()
    try:
        with pytest.raises(CallError) as refused:
            c.hello("not-a-token")
        assert (refused.value.code, refused.value.field) == ("unauthenticated", "token")
    finally:
        c.close()


# ------------------------------------------------------------------------------ request ids


def test_r16_request_ids_are_per_principal(table: Table) -> None:
    scene = Scene(table, "request-ids").added()
    seq = scene.seq()
    u1, u2 = table.sessions["player"], table.sessions["player_u2"]
    bridge = table.sessions["bridge"]
    # Three principals, one request id, three different commands: each is applied.
    original = u1.call("roll_initiative", combat=scene.combat, request_id="r", combatant="ann")
    u2.call("roll_initiative", combat=scene.combat, request_id="r", combatant="bob")
    bridge.call(
        "roll_initiative", combat=scene.combat, request_id="r", combatant="cat", **{"as": "u1"}
    )
    view = scene.view()
    assert all(c["check"] is not None for c in view["combatants"] if c["id"] != "ogre")
    assert scene.seq() == seq + 6
    # The same principal retrying gets its first answer back and nothing is applied again;
    # the same id for another command is a mistake, not a retry.
    retried = u1.call("roll_initiative", combat=scene.combat, request_id="r", combatant="ann")
    assert retried == original
    with pytest.raises(CallError) as refused:
        u1.call("roll_initiative", combat=scene.combat, request_id="r", combatant="cat")
    assert (refused.value.code, refused.value.field) == ("request_id_reused", "request_id")
    assert scene.seq() == seq + 6
    # The narrator via the Unix socket and via a token are two principals as well.
    a = table.combat_id("same-request")
    b = table.combat_id("same-request")
    assert (
        table.gm.call("create_combat", request_id="c", combat_id=a, ruleset="marvel")["combat"] == a
    )
    narrator = table.sessions["narrator"]
    assert (
        narrator.call("create_combat", request_id="c", combat_id=b, ruleset="marvel")["combat"] == b
    )


# --------------------------------------------------------------------------- hidden combatants


def _mentions(value: object, name: str) -> bool:
    return name in repr(value).lower()


def test_r16_hidden_combatant_never_reaches_players_or_observers_until_revealed(
    table: Table,
) -> None:
    scene = Scene(table, "hidden")
    scene.create()
    readers = {role: table.connect(role) for role in ("narrator", "player", "observer")}
    try:
        for reader in readers.values():
            reader.call("subscribe", combat=scene.combat, after=0)
        for cid, user in CONTROLLERS.items():
            scene.do(
                "add_combatant",
                id=cid,
                display_name=cid.title(),
                controller=user,
                player_character=user is not None,
            )
            scene.do("roll_initiative", combatant=cid, faces=FACES[cid])
        scene.do("add_combatant", id="lurker", display_name="Lurker", hidden=True)
        scene.do("roll_initiative", combatant="lurker", faces=[5, 5, 6])  # 16, after bob
        scene.do("start_combat")
        assert scene.view()["order"] == ["ann", "bob", "lurker", "cat", "ogre"]
        # u1's own command: its answer leaves out the hidden turn that follows bob's.
        u1 = table.sessions["player"]
        answer = u1.call("end_turn", combat=scene.combat, request_id="h1", turn=scene.turn())
        assert not _mentions(answer, "lurker")
        scene.do("end_turn", turn=scene.turn())  # bob's: the lurker's turn starts
        assert scene.turn()["combatant"] == "lurker"
        scene.do("apply_condition", target="lurker", type="custom", source="lurker")
        scene.do("surprise", target="cat", by=["lurker"])
        scene.do("hold", turn=scene.turn())
        scene.do("announce_trigger", facts={"event": "ambush", "actor": "lurker"}, offer=["ann"])

        for role, reader in readers.items():
            state = reader.call("get_combat", combat=scene.combat)
            history = reader.call("history", combat=scene.combat)
            # Events queued before this answer are in ``notes`` now (one ordered outbox).
            assert len(history["events"]) > 10
            if role == "narrator":
                assert _mentions(state, "lurker")
                assert _mentions(history, "lurker")
                assert _mentions(reader.notes, "lurker")
            else:
                assert not _mentions(state, "lurker"), role
                assert not _mentions(history, "lurker"), role
                assert reader.notes, role
                assert not _mentions(reader.notes, "lurker"), role
                assert state["view"]["order"] == ["ann", "bob", "cat", "ogre"]
            reader.notes.clear()

        scene.do("reveal_combatant", combatant="lurker")
        for role, reader in readers.items():
            state = reader.call("get_combat", combat=scene.combat)["view"]
            assert "lurker" in [c["id"] for c in state["combatants"]], role
            revealed = [n.params for n in reader.notes if n.params["event"] == "combatant_revealed"]
            assert [e["combatant"]["id"] for e in revealed] == ["lurker"], role
    finally:
        for reader in readers.values():
            reader.close()


def test_r16_a_narrator_run_reservation_stays_the_narrators_secret(table: Table) -> None:
    scene = Scene(table, "secret-reservation").started()
    readers = {role: table.connect(role) for role in ("narrator", "player", "observer")}
    try:
        for reader in readers.values():
            reader.call("subscribe", combat=scene.combat, after=scene.seq())
        scene.do(
            "reserve",
            turn=scene.turn_of("ogre"),
            reserved_type="standard",
            action={"kind": "attack", "targets": ["ann"]},
            trigger={"text": "ann moves", "predicate": {"actors": ["ann"]}},
        )
        for role, reader in readers.items():
            view = reader.call("get_combat", combat=scene.combat)["view"]
            history = reader.call("history", combat=scene.combat)["events"]
            kinds = {e["event"] for e in history} | {n.params["event"] for n in reader.notes}
            if role == "narrator":
                assert [r["combatant"] for r in view["reservations"]] == ["ogre"]
                assert "action_reserved" in kinds
            else:
                assert view["reservations"] == [], role
                assert "action_reserved" not in kinds, role
    finally:
        for reader in readers.values():
            reader.close()


# ------------------------------------------- hidden when it happened, whatever became of it since

READERS = ("player", "player_u2", "observer", "bridge")
"""Sessions the lurker is hidden from: u1 and u2 (neither controls it), an observer and a
bridge, which reads as an observer."""


def _narrating(table: Table, role: str) -> Client:
    """A session whose events carry their narrated ``summary`` lines."""
    c = table.open()
    c.call("hello", protocol=1, token=table.secrets[role], narrate=True)
    return c


def _lurking_scene(table: Table, name: str) -> Scene:
    """ann (u1) 17 and the ogre 12 fight, ann's turn; then a hidden, tagged lurker joins."""
    scene = Scene(table, name)
    scene.create()
    for cid in ("ann", "ogre"):
        user = CONTROLLERS[cid]
        scene.do("add_combatant", id=cid, display_name=cid.title(), controller=user)
        scene.do("roll_initiative", combatant=cid, faces=FACES[cid])
    scene.do("start_combat")
    return scene


def _read_everything(table: Table, scene: Scene, role: str) -> list[Any]:
    """What every read path gives a new narrated session of ``role`` now: the view, history
    and a subscription's catch-up, each event with its ``summary`` line."""
    late = _narrating(table, role)
    try:
        view = late.call("get_combat", combat=scene.combat)
        history = late.call("history", combat=scene.combat, limit=1000)
        late.call("subscribe", combat=scene.combat, after=0)
        return [view, history, [n.params for n in late.notes]]
    finally:
        late.close()


@pytest.mark.parametrize("change", ["undone", "removed", "defeated"])
def test_r16_a_hidden_combatant_stays_hidden_once_undone_removed_or_defeated(
    table: Table, change: str
) -> None:
    scene = _lurking_scene(table, f"hiding-{change}")
    ann = scene.turn()
    live = {role: _narrating(table, role) for role in (*READERS, "narrator")}
    try:
        for reader in live.values():
            reader.call("subscribe", combat=scene.combat, after=scene.seq())
            reader.call("subscribe_all")
        scene.do(
            "add_combatant",
            id="lurker",
            display_name="Lurker",
            tags=["lurker-tag"],
            hidden=True,
            faces=[5, 5, 6],
        )
        scene.do("apply_condition", target="lurker", type="custom", note="Lurker is webbed")
        if change == "undone":
            scene.do("undo")  # the condition
            scene.do("undo")  # the addition: the state no longer has the lurker at all
            assert "lurker" not in [c["id"] for c in scene.view()["combatants"]]
        else:
            verb = "remove" if change == "removed" else "defeat"
            scene.do(f"{verb}_combatant", combatant="lurker")
        for role in READERS:
            everything = _read_everything(table, scene, role)
            assert not _mentions(everything, "lurker"), role
            # Live events, per combat and of every combat, were told as they happened (those
            # queued before an answer are kept as its call reads it).
            live[role].call("get_combat", combat=scene.combat)
            got = [n.params for n in live[role].notes]
            assert got, role
            assert not _mentions(got, "lurker"), role
            # The history a session reads later is what it was shown live.
            told = [e["seq"] for e in everything[1]["events"] if e["seq"] > got[0]["seq"] - 1]
            assert told == sorted({e["seq"] for e in got}), role
        # The narrator still has everything: the test looks where the lurker is.
        assert _mentions(_read_everything(table, scene, "narrator"), "lurker")
        live["narrator"].call("get_combat", combat=scene.combat)
        assert _mentions([n.params for n in live["narrator"].notes], "lurker-tag")
        # An id that was hidden is refused like one that never was, in the same words.
        u1 = table.sessions["player"]
        refusals = []
        for target in ("lurker", "nobody"):
            with pytest.raises(CallError) as refused:
                u1.call(
                    "declare_action",
                    combat=scene.combat,
                    request_id=f"{scene.combat}:{target}",
                    turn=ann,
                    action={"kind": "attack", "targets": [target]},
                )
            error = refused.value
            refusals.append((error.code, error.field, error.message.replace(target, "X")))
        assert (
            refusals[0]
            == refusals[1]
            == (
                "unknown_combatant",
                "action.targets",
                refusals[1][2],
            )
        )
    finally:
        for reader in live.values():
            reader.close()


def test_r16_events_before_a_reveal_stay_hidden_over_the_wire(table: Table) -> None:
    """R16: visibility is what was hidden when an event happened. Once revealed, players get
    the whole combatant in ``combatant_revealed``, see it in the view and in every later
    event; its addition and roll from before the reveal stay the narrator's."""
    scene = _lurking_scene(table, "hiding-revealed")
    scene.do("add_combatant", id="lurker", display_name="Lurker", hidden=True, faces=[5, 5, 6])
    scene.do("reveal_combatant", combatant="lurker")
    scene.do("defeat_combatant", combatant="lurker")
    for role in READERS:
        view, history, catch_up = _read_everything(table, scene, role)
        assert "lurker" in [c["id"] for c in view["view"]["combatants"]], role
        for events in (history["events"], catch_up):
            about = [e["event"] for e in events if _mentions(e, "lurker")]
            assert about == ["combatant_revealed", "combatant_defeated"], (role, about)
            told = [e["summary"] for e in events if _mentions(e, "lurker")]
            assert all(line and "Lurker" in line for line in told), (role, told)
            revealed = [e["event"] for e in events].index("combatant_revealed")
            assert not _mentions(events[:revealed], "lurker"), role


# ------------------------------------------------------------ the largest combat, read by all


def test_the_largest_combat_allowed_is_readable_by_every_role(table: Table) -> None:
    """Combatants with every text field as long as allowed (four-byte characters) until the
    daemon refuses one for the combat's size, then rolled, started and every turn held: the
    largest view play can reach. Every role reads it whole, over TCP and WebSocket."""
    scene = Scene(table, "largest")
    scene.create()
    big = "\U0001f600" * MAX_NAME
    refused: CallError | None = None
    added = 0
    while refused is None:
        try:
            scene.do(
                "add_combatant",
                id=f"{added:03d}{big[: MAX_NAME - 3]}",
                display_name=big,
                controller=big,
                init_mod=added,
                tags=[f"{i:02d}:{big[: MAX_NAME - 3]}" for i in range(MAX_ITEMS)],
            )
            added += 1
        except CallError as e:
            refused = e
    assert (refused.code, refused.field) == ("combat_too_large", "")
    ids = [c["id"] for c in scene.view()["combatants"]]
    assert len(ids) == added < MAX_COMBATANTS
    for cid in ids:
        scene.do("roll_initiative", combatant=cid, faces=[2, 3, 4])
    scene.do("start_combat")
    for _ in ids:
        scene.do("hold", turn=scene.turn())
    for role in ("narrator", "player", "player_u2", "observer", "bridge", "bridge_narrator"):
        got = table.sessions[role].call("get_combat", combat=scene.combat)
        size = len(wire.pack(wire.Response(1, None, got)))
        assert size <= wire.MAX_MESSAGE_BYTES, role
        if role.endswith("narrator"):
            assert [c["id"] for c in got["view"]["combatants"]] == ids
            assert MAX_VIEW_BYTES * 2 // 3 < size <= MAX_VIEW_BYTES + 1024, size
