"""R16 across tables: a real daemon with several tables, tokens of every role in each, over
every transport (Unix socket, TCP, WebSocket). Every role reaches its own table's combats as
R16 lets it, and a combat of another table answers exactly as a combat that was never made;
hosting bridges manage only the tables they made or were granted."""

from __future__ import annotations

import contextlib
import itertools
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, running
from turnkeeper.methods import METHODS

ROLES = ("narrator", "player", "observer", "bridge", "bridge_narrator")
TRANSPORTS = ("unix", "tcp", "ws")


def cli(d: Daemon, *args: str) -> str:
    """``turnkeeper ARGS`` on the daemon's tokens (``Daemon.where``); returns stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", *args, *d.where()],
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    return done.stdout


@dataclass
class Tables:
    """One daemon, two tables (``one``: made with the CLI; ``two``: made by a hosting bridge
    through the protocol), a token per role in each, and a combat in each set up alike."""

    daemon: Daemon
    gm: Client
    ids: dict[str, str]
    """The tables' ids by name."""
    secrets: dict[tuple[str, str], str]
    """Token secrets by (table name, role)."""
    hosts: dict[str, str]
    """Hosting bridges' secrets: ``h1`` made table ``two``, ``h2`` manages nothing yet."""
    requests: Iterator[int] = field(default_factory=itertools.count)

    def combat(self, table: str, name: str = "fight") -> str:
        return f"{self.ids[table]}/{name}"

    def open(self, transport: str) -> Client:
        if transport == "unix":
            return Client.unix(self.daemon.socket)
        if transport == "ws":
            assert self.daemon.ws_port is not None
            return Client.ws(self.daemon.ws_port)
        assert self.daemon.tcp_port is not None
        return Client.tcp(self.daemon.tcp_port)

    def connect(self, transport: str, secret: str) -> Client:
        c = self.open(transport)
        c.hello(secret)
        return c

    def request_id(self) -> str:
        return f"r{next(self.requests)}"


def _scene(t: Tables, combat: str) -> None:
    """A marvel combat with ann (u1's) and the ogre (the narrator's), not started."""
    t.gm.call("create_combat", request_id=t.request_id(), combat_id=combat, ruleset="marvel")
    for cid, user in (("ann", "u1"), ("ogre", None)):
        t.gm.call(
            "add_combatant",
            request_id=t.request_id(),
            combat=combat,
            id=cid,
            display_name=cid.title(),
            controller=user,
            player_character=user is not None,
        )


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tables]:
    with running(tmp_path_factory.mktemp("tables"), tcp=True, ws=True) as d:
        one = cli(d, "table", "add", "Table One").strip()
        h1 = d.token("bridge", "--host")
        h2 = d.token("bridge", "--host", "--table", one)
        gm = d.client()
        t = Tables(d, gm, {"one": one}, {}, {"h1": h1, "h2": h2})
        host = t.connect("tcp", h1)
        t.ids["two"] = host.call("create_table", name="Table Two")["table"]
        for name, table in t.ids.items():
            maker = host if name == "two" else gm
            for role, user, narrator in (
                ("narrator", None, False),
                ("player", "u1", False),
                ("observer", None, False),
                ("bridge", None, False),
                ("bridge_narrator", None, True),
            ):
                kind = "bridge" if role.startswith("bridge") else role
                made = maker.call("add_token", table=table, role=kind, user=user, narrator=narrator)
                t.secrets[name, role] = made["secret"]
            _scene(t, t.combat(name))
        _scene(t, "home")  # a combat of the default table
        host.close()
        yield t


def _final_error(c: Client) -> str:
    """The code of the final error notification that ends ``c``'s session (within 5 s)."""
    c.sock.settimeout(5.0)
    seen = []
    with contextlib.suppress(EOFError, ConnectionResetError):
        while True:
            seen.append(c.notification())
    final = seen[-1]
    assert (final.method, final.params["fatal"]) == ("error", True)
    return str(final.params["code"])


def _answer(c: Client, method: str, params: dict[str, Any]) -> tuple[str, str, str] | str:
    """The error a call gets as ``(code, field, message)``, or ``"ok"``."""
    try:
        c.call(method, **params)
    except CallError as e:
        return (e.code, e.field, e.message)
    return "ok"


def _same_as_missing(
    c: Client, method: str, params: dict[str, Any], key: str, hidden: str, missing: str
) -> None:
    """``method`` on the combat ``hidden`` answers word for word as on ``missing``, a combat
    id of the same table that nobody made (the ids themselves swapped in the message)."""
    got = _answer(c, method, {**params, key: hidden})
    expected = _answer(c, method, {**params, key: missing})
    assert expected != "ok"
    assert got != "ok", f"{method} reached another table's combat"
    code, fld, message = expected
    assert got == (code, fld, message.replace(missing, hidden)), method


QUERIES = ("get_combat", "history", "subscribe")
COMMANDS = sorted(
    name for name, m in METHODS.items() if m.kind == "command" and name != "create_combat"
)


def _command_params(method: str) -> dict[str, Any]:
    """Params that parse for ``method`` where it is simple to make them; the others are
    refused alike for a hidden and a missing combat, which is what is checked."""
    if method == "add_combatant":
        return {"id": "zed", "display_name": "Zed"}
    if method == "roll_initiative":
        return {"combatant": "ann", "faces": [6, 6, 6]}
    if method in ("remove_combatant", "defeat_combatant", "reveal_combatant"):
        return {"combatant": "ann"}
    return {}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("method", QUERIES)
def test_r16_tables_a_query_of_another_tables_combat_is_as_of_none(
    tables: Tables, transport: str, role: str, method: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", role])
    own = tables.combat("one")
    assert _answer(c, method, {"combat": own}) == "ok"  # every role reads its own table
    for hidden in (tables.combat("two"), "home"):
        missing = hidden + "-never-made"
        _same_as_missing(c, method, {}, "combat", hidden, missing)
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
def test_r16_tables_every_command_on_another_tables_combat_is_as_on_none(
    tables: Tables, transport: str, role: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", role])
    as_user = {"as": "u1"} if role.startswith("bridge") else {}
    for method in COMMANDS:
        params = {**_command_params(method), **as_user}
        # A fresh request id per call: the same id twice would be refused as reused.
        hidden, missing = tables.combat("two"), tables.combat("two", "never-made")
        got = _answer(c, method, {**params, "combat": hidden, "request_id": tables.request_id()})
        expected = _answer(
            c, method, {**params, "combat": missing, "request_id": tables.request_id()}
        )
        assert expected != "ok", method
        assert got != "ok", method
        assert got == (expected[0], expected[1], expected[2].replace(missing, hidden)), method
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
def test_r16_tables_a_role_commands_its_own_tables_combat_as_r16_lets_it(
    tables: Tables, transport: str, role: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", role])
    own = tables.combat("one")
    hero = f"{role}-{transport}"
    tables.gm.call(
        "add_combatant",
        request_id=tables.request_id(),
        combat=own,
        id=hero,
        display_name=hero,
        controller="u1",
        player_character=True,
    )
    seq = tables.gm.call("get_combat", combat=own)["seq"]
    params: dict[str, Any] = {"combat": own, "request_id": tables.request_id()}
    if role.startswith("bridge"):
        params["as"] = "u1"
    # Rolling the initiative of u1's combatant is the player's, the bridge's for u1, the
    # narrator's; never the observer's.
    got = _answer(c, "roll_initiative", {**params, "combatant": hero, "faces": [6, 6, 6]})
    if role == "observer":
        assert got != "ok"
        assert got[0] == "forbidden"
    else:
        assert got == "ok"
        assert tables.gm.call("get_combat", combat=own)["seq"] > seq
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
def test_r16_tables_every_command_reaches_the_own_tables_combat(
    tables: Tables, transport: str, role: str
) -> None:
    """Every command on a combat of the session's own table reaches it: answered as R16 lets
    the role (done, or refused by the engine or the role's rights), never as a combat that
    does not exist. Each (role, transport) plays on a combat of its own."""
    combat = tables.combat("one", f"own-{role}-{transport}")
    _scene(tables, combat)
    c = tables.connect(transport, tables.secrets["one", role])
    as_user = {"as": "u1"} if role.startswith("bridge") else {}
    done = 0
    for method in COMMANDS:
        params = {**_command_params(method), **as_user, "combat": combat}
        got = _answer(c, method, {**params, "request_id": tables.request_id()})
        assert got == "ok" or got[0] != "unknown_combat", (method, got)
        done += got == "ok"
    # Those that could be done were: the observer may do none, the others some.
    assert (done == 0) == (role == "observer")
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_r16_tables_a_hosting_bridge_reaches_its_tables_combats_and_no_others(
    tables: Tables, transport: str
) -> None:
    """h1 (its own table the default one; it made table two): every query and command
    reaches the combats of its tables, and one of table one answers as a combat never
    made."""
    h1 = tables.connect(transport, tables.hosts["h1"])
    hidden, missing = tables.combat("one"), tables.combat("one", "never-made")
    for method in QUERIES:
        for own in (tables.combat("two"), "home"):
            assert _answer(h1, method, {"combat": own}) == "ok", (method, own)
        _same_as_missing(h1, method, {}, "combat", hidden, missing)
    combat = tables.combat("two", f"host-{transport}")
    _scene(tables, combat)
    for method in COMMANDS:
        params = {**_command_params(method), "as": "u1"}
        got = _answer(h1, method, {**params, "combat": combat, "request_id": tables.request_id()})
        assert got == "ok" or got[0] != "unknown_combat", (method, got)
        got = _answer(h1, method, {**params, "combat": hidden, "request_id": tables.request_id()})
        expected = _answer(
            h1, method, {**params, "combat": missing, "request_id": tables.request_id()}
        )
        assert expected != "ok", method
        assert got != "ok", method
        assert got == (expected[0], expected[1], expected[2].replace(missing, hidden)), method
    h1.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
def test_r16_tables_list_combats_shows_only_the_sessions_tables(
    tables: Tables, transport: str, role: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", role])
    rows = c.call("list_combats")
    assert {row["combat"] for row in rows} >= {tables.combat("one")}
    assert all(row["combat"].startswith(tables.ids["one"] + "/") for row in rows)
    assert all(
        row["combat"].startswith(tables.ids["one"] + "/")
        for row in c.call("list_combats", limit=500)
    )
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
def test_r16_tables_subscribe_all_gets_only_the_sessions_tables_events(
    tables: Tables, transport: str, role: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", role])
    answer = c.call("subscribe_all")
    assert set(answer["seqs"]) <= {
        cid for cid in answer["seqs"] if cid.startswith(tables.ids["one"])
    }
    assert tables.combat("one") in answer["seqs"]
    # Another table's combat and the default table's move first, then this table's: the first
    # event this session gets is its own table's.
    for combat in (tables.combat("two"), "home", tables.combat("one")):
        tables.gm.call(
            "add_combatant",
            request_id=tables.request_id(),
            combat=combat,
            id=f"x{next(tables.requests)}",
            display_name="X",
        )
    note = c.notification()
    assert note.method == "event"
    assert note.params["combat"] == tables.combat("one")
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_r16_tables_create_combat_names_a_combat_of_the_sessions_table(
    tables: Tables, transport: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", "narrator"])
    one, two = tables.ids["one"], tables.ids["two"]
    for outside in ("plain", f"{two}/x", "t0000000000/x"):
        got = _answer(
            c,
            "create_combat",
            {"request_id": tables.request_id(), "combat_id": outside, "ruleset": "marvel"},
        )
        assert got != "ok", outside
        assert got[:2] == ("outside_table", "combat_id"), outside
    mine = f"{one}/new-{transport}"
    params = {"combat_id": mine, "ruleset": "marvel"}
    assert _answer(c, "create_combat", {**params, "request_id": tables.request_id()}) == "ok"
    again = _answer(c, "create_combat", {**params, "request_id": tables.request_id()})
    assert again != "ok"
    assert again[0] == "combat_exists"
    # The combat is the table's: the operator sees it, the other table does not.
    assert mine in {row["combat"] for row in tables.gm.call("list_combats")}
    other = tables.connect(transport, tables.secrets["two", "narrator"])
    assert mine not in {row["combat"] for row in other.call("list_combats")}
    c.close()
    other.close()


def test_r16_tables_a_reused_request_id_on_another_tables_combat_is_as_on_none(
    tables: Tables,
) -> None:
    c = tables.connect("tcp", tables.secrets["one", "narrator"])
    used = tables.request_id()
    c.call("add_combatant", request_id=used, combat=tables.combat("one"), id="rr", display_name="R")
    params = {"request_id": used, "id": "rr", "display_name": "R"}
    _same_as_missing(
        c, "add_combatant", params, "combat", tables.combat("two"), tables.combat("two", "none")
    )
    c.close()


def test_r16_tables_the_operator_reaches_every_table(tables: Tables) -> None:
    listed = {row["combat"] for row in tables.gm.call("list_combats")}
    assert {tables.combat("one"), tables.combat("two"), "home"} <= listed
    for combat in (tables.combat("one"), tables.combat("two"), "home"):
        assert tables.gm.call("get_combat", combat=combat)["combat"] == combat
    got = _answer(
        tables.gm,
        "create_combat",
        {"request_id": tables.request_id(), "combat_id": "t0000000000/x", "ruleset": "marvel"},
    )
    assert got == ("unknown_table", "combat_id", "no table 't0000000000'")


# Hosting bridges ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", ROLES)
def test_r16_tables_only_the_operator_and_hosting_bridges_manage_tables(
    tables: Tables, transport: str, role: str
) -> None:
    c = tables.connect(transport, tables.secrets["one", role])
    one = tables.ids["one"]
    for method, params in (
        ("create_table", {"name": "mine"}),
        ("list_tables", {}),
        ("add_token", {"table": one, "role": "observer"}),
        ("list_tokens", {"table": one}),
        ("revoke_token", {"table": one, "id": "00000000"}),
    ):
        got = _answer(c, method, params)
        assert got != "ok", method
        assert got[:2] == ("forbidden", "method"), method
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_r16_tables_a_host_never_reaches_a_table_it_does_not_manage(
    tables: Tables, transport: str
) -> None:
    """h2 manages nothing: table two (h1's) answers it as a table that does not exist."""
    h2 = tables.connect(transport, tables.hosts["h2"])
    two = tables.ids["two"]
    assert two not in {row["table"] for row in h2.call("list_tables")}
    victim = tables.connect("tcp", tables.hosts["h1"]).call("list_tokens", table=two)[0]["id"]
    for method, params in (
        ("add_token", {"role": "narrator"}),
        ("list_tokens", {}),
        ("revoke_token", {"id": victim}),
    ):
        _same_as_missing(h2, method, params, "table", two, "t0000000000")
    # Nor its combats: h2's own table is table one.
    _same_as_missing(
        h2, "get_combat", {}, "combat", tables.combat("two"), tables.combat("two", "none")
    )
    h2.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_r16_tables_a_host_makes_a_table_and_manages_its_tokens(
    tables: Tables, transport: str
) -> None:
    h1 = tables.connect(transport, tables.hosts["h1"])
    made = h1.call("create_table", name=f"Guild {transport}")
    table = made["table"]
    assert re.fullmatch(r"t[0-9a-f]{10}", table)
    assert table in {row["table"] for row in h1.call("list_tables")}
    # Its maker reaches its combats at once, without a new hello.
    assert h1.call("subscribe_all")["more"] is False
    token = h1.call("add_token", table=table, role="narrator")
    assert token["table"] == table
    assert token["secret"].startswith("tk_")
    narrator = tables.connect(transport, token["secret"])
    combat = f"{table}/brawl"
    narrator.call("create_combat", request_id="b1", combat_id=combat, ruleset="dnd3e")
    assert h1.call("get_combat", combat=combat)["combat"] == combat
    # Its subscribe_all, made before the table, follows the table's combats too.
    first = h1.notification()
    assert (first.method, first.params["combat"]) == ("event", combat)
    # Its list is its tables' combats merged in id order, whole or a page at a time.
    ids = [row["combat"] for row in h1.call("list_combats")]
    assert ids == sorted(ids)
    assert {"home", tables.combat("two"), combat} <= set(ids)
    assert not any(cid.startswith(tables.ids["one"]) for cid in ids)
    paged: list[str] = []
    while page := h1.call("list_combats", limit=2, **({"after": paged[-1]} if paged else {})):
        paged += [row["combat"] for row in page]
    assert paged == ids
    assert [r["id"] for r in h1.call("list_tokens", table=table)] == [token["id"]]
    assert h1.call("revoke_token", table=table, id=token["id"]) == {
        "id": token["id"],
        "table": table,
    }
    # The revoked token's session ends, as after ``turnkeeper token revoke``.
    assert _final_error(narrator) == "token_revoked"
    assert h1.call("list_tokens", table=table) == []
    h1.close()


def test_r16_tables_a_grant_taken_back_ends_the_hosts_sessions(tables: Tables) -> None:
    h2 = tables.connect("tcp", tables.hosts["h2"])
    h2_id = next(
        r["id"] for r in tables.gm.call("list_tokens", table=tables.ids["one"]) if r["host"]
    )
    two = tables.ids["two"]
    cli(tables.daemon, "table", "grant", two, h2_id)
    # The grant reaches the running session within TOKEN_CHECK_SECONDS: table two's combat,
    # and its tokens.
    deadline = time.monotonic() + 5
    while _answer(h2, "get_combat", {"combat": tables.combat("two")}) != "ok":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert two in {r["table"] for r in h2.call("list_tables")}
    assert h2.call("list_tokens", table=two)
    cli(tables.daemon, "table", "ungrant", two, h2_id)
    assert _final_error(h2) == "tables_changed"
    h2 = tables.connect("tcp", tables.hosts["h2"])
    assert two not in {r["table"] for r in h2.call("list_tables")}
    h2.close()


def test_r16_tables_only_the_operator_revokes_a_hosting_bridges_token(tables: Tables) -> None:
    """A hosting bridge's token the operator placed in a table is not its host's to revoke:
    revoking it would also take its grants of tables the host does not manage."""
    two = tables.ids["two"]
    placed = cli(tables.daemon, "token", "add", "bridge", "--host", "--table", two).split()[0]
    h1 = tables.connect("tcp", tables.hosts["h1"])
    got = _answer(h1, "revoke_token", {"table": two, "id": placed})
    assert got != "ok"
    assert got[:2] == ("forbidden", "id")
    assert placed in {r["id"] for r in h1.call("list_tokens", table=two)}
    # The operator may.
    assert tables.gm.call("revoke_token", table=two, id=placed) == {"id": placed, "table": two}
    h1.close()


@pytest.mark.parametrize("bad", ["two\nlines", "tab\there", "nul\x00", "sep\u2028"])
def test_r16_tables_names_and_users_with_control_characters_are_refused(
    tables: Tables, bad: str
) -> None:
    """``turnkeeper table list`` and ``token list`` print a row per line: a line break in a
    name or a user would forge rows."""
    h1 = tables.connect("tcp", tables.hosts["h1"])
    before = h1.call("list_tables")
    got = _answer(h1, "create_table", {"name": bad})
    assert got != "ok"
    assert got[:2] == ("invalid_params", "name")
    assert h1.call("list_tables") == before
    two = tables.ids["two"]
    tokens = h1.call("list_tokens", table=two)
    got = _answer(h1, "add_token", {"table": two, "role": "player", "user": bad})
    assert got != "ok"
    assert got[:2] == ("invalid_params", "user")
    assert h1.call("list_tokens", table=two) == tokens
    h1.close()


def test_r16_tables_tokens_made_at_once_by_the_cli_and_the_protocol_are_all_kept(
    tables: Tables,
) -> None:
    """The ``token`` command and the daemon change the token file under one lock: tokens made
    at the same time by both are all kept."""
    table = cli(tables.daemon, "table", "add", "Busy").strip()
    made: list[str] = []

    def by_cli() -> None:
        made.append(cli(tables.daemon, "token", "add", "observer", "--table", table).split()[0])

    threads = [threading.Thread(target=by_cli) for _ in range(6)]
    for t in threads:
        t.start()
    # The daemon makes tokens for as long as the CLI's run, so that their changes overlap.
    by_protocol = 0
    while by_protocol < 20 or any(t.is_alive() for t in threads):
        made.append(tables.gm.call("add_token", table=table, role="observer")["id"])
        by_protocol += 1
    for t in threads:
        t.join()
    assert len(made) == 6 + by_protocol
    assert sorted(r["id"] for r in tables.gm.call("list_tokens", table=table)) == sorted(made)


def test_r16_tables_hello_says_the_sessions_table(tables: Tables) -> None:
    c = tables.open("tcp")
    session = c.hello(tables.secrets["one", "player"])["session"]
    assert (session["table"], session["host"], session["user"]) == (tables.ids["one"], False, "u1")
    operator = Client.unix(tables.daemon.socket)
    assert operator.hello()["session"]["table"] is None
    c.close()
    operator.close()


def test_r16_tables_plugin_counters_are_the_operators_alone(tables: Tables) -> None:
    """The plugins' counters are the daemon's, every table's play together: a session of a
    table sees the plugins, and no count that moves with another table's play."""
    combat = tables.combat("two", "plugins")
    _scene(tables, combat)
    watchers = [tables.connect("tcp", tables.secrets["one", role]) for role in ROLES]
    watchers.append(tables.connect("tcp", tables.hosts["h2"]))
    before = [w.call("list_plugins") for w in watchers]
    calls = {p["name"]: p["calls"] for p in tables.gm.call("list_plugins")["loaded"]}
    two = tables.connect("tcp", tables.secrets["two", "narrator"])
    assert "calls" not in two.call("list_plugins")["loaded"][0]
    two.call("start_combat", request_id=tables.request_id(), combat=combat)
    # The operator's counters show the start's hooks ran, once the background ones are done.
    after = {p["name"]: p["calls"] for p in tables.gm.call("list_plugins")["loaded"]}
    assert after["surprise"] > calls["surprise"]
    for w, seen in zip(watchers, before, strict=True):
        assert w.call("list_plugins") == seen
        assert {p["name"] for p in seen["loaded"]} == set(calls)
        assert all("calls" not in p and "disabled" not in p for p in seen["loaded"])
        w.close()
    two.close()
