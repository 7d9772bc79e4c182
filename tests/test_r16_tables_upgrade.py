"""R16 across tables, upgrading: a data directory written by the daemon before tables (made
with that code, kept in ``tests/data/v1_data_dir``: its database at schema version 1, its
token file a bare list) is served as it was, everything of it in the default table; and the
token file and the store's membership read and write as documented."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, running
from turnkeeper import auth
from turnkeeper.auth import AuthError, TokenFileError, Tokens
from turnkeeper.store import DB_FILE, SCHEMA_VERSION, Batch, Store
from turnkeeper.tables import DEFAULT_TABLE, TABLE_ID, table_of

OLD = Path(__file__).parent / "data" / "v1_data_dir"
"""A data directory the daemon before tables wrote (``turnkeeper serve`` at the commit before
them): combats ``bank`` (marvel, with Spider-Man, u1's, and an ogre), ``tavern`` (dnd3e) and
``t0123456789/lookalike`` (an id shaped like a table's, from before tables), a narrator token
and a player token for u1, whose secrets are in ``secrets.txt``."""


def _old_data_dir(root: Path) -> tuple[Path, dict[str, str]]:
    data = root / "data"
    data.mkdir(mode=0o700)
    for name in ("turnkeeper.db", "tokens.json"):
        shutil.copy(OLD / name, data / name)
        (data / name).chmod(0o600)
    secrets = dict(line.split() for line in (OLD / "secrets.txt").read_text().splitlines())
    return data, secrets


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT,
    )


def test_r16_tables_an_old_data_dir_is_served_unchanged_in_the_default_table(
    tmp_path: Path,
) -> None:
    data, secrets = _old_data_dir(tmp_path)
    with running(tmp_path, tcp=True) as d:
        assert d.tcp_port is not None
        narrator = Client.tcp(d.tcp_port)
        session = narrator.hello(secrets["narrator"])["session"]
        assert (session["role"], session["table"]) == ("narrator", DEFAULT_TABLE)
        combats = {row["combat"]: row for row in narrator.call("list_combats")}
        assert set(combats) == {"bank", "tavern", "t0123456789/lookalike"}
        assert combats["bank"]["seq"] == 6
        view = narrator.call("get_combat", combat="bank")["view"]
        assert [c["id"] for c in view["combatants"]] == ["spidey", "ogre"]
        # The old player still plays its own combatant; old request ids are still remembered.
        player = Client.tcp(d.tcp_port)
        player.hello(secrets["player"])
        done = player.call(
            "roll_initiative", request_id="p1", combat="bank", combatant="spidey", faces=[6, 5, 4]
        )
        assert done["seq"] == 8
        gm = d.client()
        first = gm.call("create_combat", request_id="c4", combat_id="tavern", ruleset="dnd3e")
        assert first["seq"] == 2  # the answer remembered before the upgrade
        # A lookalike id from before tables stays in the default table.
        assert narrator.call("get_combat", combat="t0123456789/lookalike")["seq"] == 2
        # The default table goes on creating plain ids.
        narrator.call("create_combat", request_id="n1", combat_id="new", ruleset="marvel")
        # The token file is read as it is, and stays a list until it changes.
        assert isinstance(json.loads((data / "tokens.json").read_text()), list)
        table = _cli(data, "table", "add", "Second").stdout.strip()
        assert TABLE_ID.fullmatch(table)
        written = json.loads((data / "tokens.json").read_text())
        assert written["version"] == 2
        assert {t["table"] for t in written["tokens"]} == {DEFAULT_TABLE}
        # The old tokens go on working after the rewrite, with their table.
        again = Client.tcp(d.tcp_port)
        assert again.hello(secrets["narrator"])["session"]["table"] == DEFAULT_TABLE
        with pytest.raises(CallError) as refused:
            again.call("get_combat", combat=f"{table}/nothing")
        assert refused.value.code == "unknown_combat"
        for c in (narrator, player, gm, again):
            c.close()
        assert d.stop() == 0
    with sqlite3.connect(data / DB_FILE) as db:
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        tables = set(db.execute("SELECT DISTINCT table_id FROM combats"))
    assert version == SCHEMA_VERSION == 4
    assert tables == {(DEFAULT_TABLE,)}


def test_r16_tables_membership_is_stored_with_the_combat_and_read_at_start(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        table = _cli(d.data_dir, "table", "add", "Kept").stdout.strip()
        gm = d.client()
        gm.call("create_combat", request_id="a", combat_id=f"{table}/x", ruleset="marvel")
        gm.call("create_combat", request_id="b", combat_id="plain", ruleset="marvel")
        gm.close()
        assert d.stop() == 0
        with sqlite3.connect(d.data_dir / DB_FILE) as db:
            rows = dict(db.execute("SELECT combat_id, table_id FROM combats"))
        assert rows == {f"{table}/x": table, "plain": DEFAULT_TABLE}
        token = Daemon.token(d, "observer", "--table", table)
        d.start()
        c = Client.unix(d.socket)
        c.hello(token)
        assert [row["combat"] for row in c.call("list_combats")] == [f"{table}/x"]
        c.close()


def test_r16_tables_the_store_migrates_a_version_1_database_in_place(tmp_path: Path) -> None:
    data, _ = _old_data_dir(tmp_path)
    store = Store.open(data)
    try:
        assert store.memberships() == {}
    finally:
        store.close()
    with sqlite3.connect(data / DB_FILE) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(combats)")]
    assert columns[-1] == "table_id"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_r16_tables_the_store_keeps_the_table_a_batch_creates_its_combat_in(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "data")
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(store.run)
            for combat, table in (("t00000000aa/x", "t00000000aa"), ("y", DEFAULT_TABLE)):
                batch = Batch(combat, 1, ({"event": "x"},), "marvel", None, None, 0.0, table=table)
                await store.commit(batch)
            assert store.memberships() == {"t00000000aa/x": "t00000000aa"}
            await store.stop()
    finally:
        store.close()


def test_r16_tables_a_combat_id_says_its_table() -> None:
    assert table_of("t3f9a2c1d5e/goblins") == "t3f9a2c1d5e"
    for plain in ("goblins", "t3f9a2c1d5/x", "T3F9A2C1D5E/x", "t3f9a2c1d5e", "x/t3f9a2c1d5e/y"):
        assert table_of(plain) == DEFAULT_TABLE, plain


# The token file ---------------------------------------------------------------------------------


def test_r16_tables_a_token_file_of_either_version_is_read(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path)
    (tmp_path / "tokens.json").write_text(
        json.dumps(
            [
                {
                    "id": "a",
                    "role": "observer",
                    "user": None,
                    "narrator": False,
                    "hash": "0" * 64,
                    "created": 1.0,
                }
            ]
        )
    )
    (record,) = tokens.read().tokens
    assert (record.table, record.host) == (DEFAULT_TABLE, False)
    table = tokens.add_table("T")
    _, secret = tokens.add("player", "u1", table=table.id)
    principal = tokens.authenticate(secret)
    assert principal is not None
    assert principal.table == table.id
    assert tokens.scope(principal) == frozenset((table.id,))
    assert [r.table for r in Tokens(tmp_path).read().tokens] == [DEFAULT_TABLE, table.id]


_TOKEN = {
    "id": "a",
    "role": "observer",
    "user": None,
    "narrator": False,
    "hash": "0" * 64,
    "created": 1.0,
    "table": DEFAULT_TABLE,
    "host": False,
}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"version": 3, "tables": [], "tokens": []}, "nor a version 2 token file"),
        ({"version": 2, "tables": [{"id": "t1"}], "tokens": []}, "table 1 does not have"),
        (
            {
                "version": 2,
                "tables": [{"id": "t", "name": "n", "created": 1, "managers": [1]}],
                "tokens": [],
            },
            "table 1 has a managers of the wrong type",
        ),
        (
            {
                "version": 2,
                "tables": [],
                "tokens": [
                    {
                        "id": "a",
                        "role": "observer",
                        "user": None,
                        "narrator": False,
                        "hash": "0" * 64,
                        "created": 1.0,
                        "table": "t0000000000",
                        "host": False,
                    }
                ],
            },
            "token 1 has an unknown table",
        ),
        (
            {"version": 2, "tables": [], "tokens": [_TOKEN, {**_TOKEN, "hash": "1" * 64}]},
            "token 2 has the id 'a' of another token",
        ),
        (
            {
                "version": 2,
                "tables": [{"id": t, "name": "n", "created": 1, "managers": []} for t in "tt"],
                "tokens": [],
            },
            "table 2 has the id 't' of another table",
        ),
    ],
)
def test_r16_tables_a_malformed_token_file_is_refused_naming_the_problem(
    tmp_path: Path, body: object, problem: str
) -> None:
    (tmp_path / "tokens.json").write_text(json.dumps(body))
    with pytest.raises(TokenFileError) as refused:
        Tokens(tmp_path).read()
    assert problem in refused.value.message


def test_r16_tables_tokens_and_grants_are_checked_by_the_token_file(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path)
    with pytest.raises(AuthError) as refused:
        tokens.add("observer", table="t0000000000")
    assert (refused.value.code, refused.value.field) == ("unknown_table", "table")
    with pytest.raises(AuthError) as refused:
        tokens.add("narrator", host=True)
    assert refused.value.field == "host"
    table = tokens.add_table("T")
    plain, _ = tokens.add("bridge")
    with pytest.raises(AuthError) as refused:
        tokens.grant(table.id, plain.id)
    assert refused.value.field == "token"
    host, secret = tokens.add("bridge", host=True)
    tokens.grant(table.id, host.id)
    principal = tokens.authenticate(secret)
    assert principal is not None
    assert tokens.scope(principal) == frozenset((DEFAULT_TABLE, table.id))
    # Revoking the host takes its grants with it.
    assert tokens.revoke(host.id)
    assert tokens.read().tables[0].managers == ()


def test_r16_tables_a_new_token_never_takes_the_id_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token ids are drawn at random: a draw that repeats one is drawn again."""
    draws = iter(["aaaaaaaa", "aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr(auth.secrets, "token_hex", lambda n: next(draws))
    tokens = Tokens(tmp_path)
    first, one = tokens.add("narrator")
    second, two = tokens.add("player", "u1")
    assert (first.id, second.id) == ("aaaaaaaa", "bbbbbbbb")
    assert [r.id for r in Tokens(tmp_path).read().tokens] == ["aaaaaaaa", "bbbbbbbb"]
    # Each secret is its own token: revoking one leaves the other valid.
    p1, p2 = tokens.authenticate(one), tokens.authenticate(two)
    assert p1 is not None
    assert p2 is not None
    assert p1.key != p2.key
    assert tokens.revoke(first.id)
    assert not tokens.still_valid(p1)
    assert tokens.still_valid(p2)


def test_r16_tables_a_change_of_the_token_file_is_on_disk_when_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new file and its rename are synced (the file, then its directory) before a change
    returns: a token made or revoked does not come back after a power cut."""
    synced: list[Path] = []
    sync = os.fsync

    def noted(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        sync(fd)

    monkeypatch.setattr(auth.os, "fsync", noted)
    tokens = Tokens(tmp_path)
    tokens.add("observer")
    assert synced == [tmp_path / "tokens.tmp", tmp_path]


def test_r16_tables_a_change_reads_the_file_again_whatever_its_stamp(tmp_path: Path) -> None:
    """A change starts from the file as it is under the lock, not from a copy cached by its
    inode, time and size: an edit that keeps all three is not lost."""
    tokens = Tokens(tmp_path)
    first, _ = tokens.add("observer")
    tokens.read()
    path = tmp_path / "tokens.json"
    st = path.stat()
    # Another token of the same length, written in place at the same time.
    edited = path.read_text().replace(first.id, "f" * len(first.id))
    assert len(edited) == len(path.read_text())
    path.write_text(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    tokens.add("observer")
    assert "f" * len(first.id) in {r.id for r in Tokens(tmp_path).read().tokens}


def test_r16_tables_a_hosts_tables_are_worked_out_once_per_read_of_the_file(
    tmp_path: Path,
) -> None:
    """A hosting bridge's tables are looked up, not found by a scan of every table at each
    request: the same set until the file changes, and the change seen at once."""
    tokens = Tokens(tmp_path)
    host, secret = tokens.add("bridge", host=True)
    tables = [tokens.add_table(f"T{n}", host.id if n % 2 else None) for n in range(6)]
    principal = tokens.authenticate(secret)
    assert principal is not None
    mine = [t.id for t in tables[1::2]]
    assert tokens.managed(principal) == mine
    scope = tokens.scope(principal)
    assert scope == frozenset((DEFAULT_TABLE, *mine))
    assert tokens.scope(principal) is scope
    tokens.grant(tables[0].id, host.id)
    assert tokens.managed(principal) == [tables[0].id, *mine]  # in the file's order
    assert tokens.scope(principal) == scope | {tables[0].id}


# The CLI ----------------------------------------------------------------------------------------


def test_r16_tables_the_cli_makes_lists_and_grants_tables(tmp_path: Path) -> None:
    data = tmp_path / "data"
    made = _cli(data, "table", "add", "Guild of Ann")
    assert made.returncode == 0
    table = made.stdout.strip()
    host = _cli(data, "token", "add", "bridge", "--host").stdout.splitlines()[0]
    assert host.endswith(" bridge host -")
    host_id = host.split()[0]
    player = _cli(data, "token", "add", "player", "--user", "u1", "--table", table)
    assert player.stdout.splitlines()[0].endswith(f" player u1 table={table}")
    assert _cli(data, "table", "grant", table, host_id).returncode == 0
    assert _cli(data, "table", "list").stdout.splitlines() == [
        "default default",
        f"{table} Guild of Ann managers={host_id}",
    ]
    assert _cli(data, "table", "ungrant", table, host_id).returncode == 0
    assert _cli(data, "table", "list").stdout.splitlines()[1] == f"{table} Guild of Ann"
    unknown = _cli(data, "token", "add", "observer", "--table", "t0000000000")
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "turnkeeper: table: no table 't0000000000'\n",
    )
    assert _cli(data, "token", "add", "observer", "--host").returncode == 2
