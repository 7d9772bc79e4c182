"""Tables and tokens shared by the daemons on one PostgreSQL (issue 12, part 3): made,
granted or revoked through one daemon (or ``turnkeeper token``/``table --store``), in force on
every other. Real PostgreSQL, real ``turnkeeper serve`` subprocesses, real sockets."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, on_store, stop_all
from postgres import sql
from test_r16_tables import _answer, _final_error
from turnkeeper.auth import digest
from turnkeeper.stores import postgresql
from turnkeeper.stores.changes import RECONNECT_PAUSE
from turnkeeper.stores.postgresql import SCHEMA
from turnkeeper.stores.tokens import REREAD_SECONDS, STALE_SECONDS, SharedTokens
from turnkeeper.transport.session import TOKEN_CHECK_SECONDS

NOTIFIED_BOUND = 2.0
"""Seconds a change takes, at most, to reach another daemon's sessions when its notification
arrives: the sessions' check (TOKEN_CHECK_SECONDS) and the notification's way, with room for a
busy test machine."""

REREAD_BOUND = REREAD_SECONDS + TOKEN_CHECK_SECONDS + 2.0
"""The same when the notification is lost: the periodic read of the tables and tokens."""

STALE_BOUND = STALE_SECONDS + TOKEN_CHECK_SECONDS + 2.0
"""Seconds, at most, before a daemon that can read no tokens ends its token sessions."""


@pytest.fixture
def pair(tmp_path: Path, postgres_db: str) -> Iterator[tuple[Daemon, Daemon]]:
    a, b = on_store(tmp_path, postgres_db, ("a", "b"))
    try:
        yield a, b
    finally:
        stop_all(a, b)


def turnkeeper(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=CALL_TIMEOUT,
    )


def _hello(d: Daemon, secret: str) -> Client:
    return _session(d, secret)[0]


def _session(d: Daemon, secret: str) -> tuple[Client, dict[str, Any]]:
    """A session of ``secret`` on ``d``, and what hello says of it."""
    c = Client.unix(d.socket)
    return c, c.hello(secret)["session"]


def _ended(c: Client, within: float) -> str:
    """The code of the final error notification that ends ``c``'s session within ``within``
    seconds."""
    c.sock.settimeout(within)
    seen = []
    with contextlib.suppress(EOFError, ConnectionResetError):
        while True:
            seen.append(c.notification())
    assert (seen[-1].method, seen[-1].params["fatal"]) == ("error", True)
    return str(seen[-1].params["code"])


def _refused(d: Daemon, secret: str) -> bool:
    """Whether ``d`` refuses a hello with ``secret`` as that of an unknown token."""
    c = Client.unix(d.socket)
    try:
        c.hello(secret)
    except CallError as e:
        code = e.code
    else:
        code = "ok"
    finally:
        c.close()
    return code == "unauthenticated"


def test_a_table_and_token_made_on_one_daemon_work_on_the_other(
    pair: tuple[Daemon, Daemon],
) -> None:
    a, b = pair
    gm_a = a.client()
    table = gm_a.call("create_table", name="Guild")["table"]
    token = gm_a.call("add_token", table=table, role="narrator")
    # At once, not within a bound: B looks a secret it does not know up in the database.
    narrator, session = _session(b, token["secret"])
    assert session["table"] == table
    combat = f"{table}/brawl"
    narrator.call("create_combat", request_id="b1", combat_id=combat, ruleset="marvel")
    assert gm_a.call("get_combat", combat=combat)["combat"] == combat
    gm_b = b.client()
    assert table in {row["table"] for row in gm_b.call("list_tables")}
    assert [r["id"] for r in gm_b.call("list_tokens", table=table)] == [token["id"]]
    # Only the hash of the secret is in the database, as in tokens.json.
    rows = sql(a_dsn(a), f"SELECT hash FROM {SCHEMA}.tokens WHERE token_id = %s", token["id"])
    assert rows == [(digest(token["secret"]),)]
    assert token["secret"] not in str(sql(a_dsn(a), f"SELECT * FROM {SCHEMA}.tokens"))
    for c in (gm_a, gm_b, narrator):
        c.close()


def a_dsn(d: Daemon) -> str:
    """The database ``d`` runs on (its ``--store``)."""
    return d.extra[d.extra.index("--store") + 1]


def test_a_token_revoked_on_one_daemon_ends_its_sessions_on_the_other(
    pair: tuple[Daemon, Daemon],
) -> None:
    a, b = pair
    gm_a = a.client()
    table = gm_a.call("create_table", name="Guild")["table"]
    token = gm_a.call("add_token", table=table, role="observer")
    listener = _hello(b, token["secret"])
    listener.call("subscribe_all")  # a session that only listens: no request to refuse
    started = time.monotonic()
    gm_a.call("revoke_token", table=table, id=token["id"])
    assert _final_error(listener) == "token_revoked"
    took = time.monotonic() - started
    assert took < NOTIFIED_BOUND, took
    assert _refused(b, token["secret"])
    gm_a.close()


def test_a_revocation_heard_wakes_the_sessions_check_at_once(postgres_db: str) -> None:
    """The copy a daemon reads on a revocation's notification wakes its sessions' check
    (``TokenBook.changed``) at once, not at the check's next tick: revocation reaches the
    sessions in the notification's milliseconds."""
    postgresql.migrate(postgres_db)
    maker, daemon = SharedTokens(postgres_db), SharedTokens(postgres_db)
    record, _ = maker.add("observer")
    daemon.read()

    async def revoked_while_the_check_waits() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.run)
            with anyio.fail_after(CALL_TIMEOUT):
                async with anyio.create_task_group() as check:
                    check.start_soon(daemon.changed)
                    await anyio.to_thread.run_sync(maker.revoke, record.id)
            tg.cancel_scope.cancel()

    try:
        anyio.run(revoked_while_the_check_waits)
        assert record.id not in {r.id for r in daemon.load().tokens}
    finally:
        maker.close()
        daemon.close()


def test_a_revocation_whose_notification_is_lost_reaches_the_other_daemon_by_the_reread(
    pair: tuple[Daemon, Daemon],
) -> None:
    """A revocation no daemon hears of (the row deleted by hand, no notification) still
    reaches every daemon within REREAD_SECONDS: what a notification lost with a listening
    session comes to."""
    a, b = pair
    gm_a = a.client()
    token = gm_a.call("add_token", table="default", role="observer")
    on_a, on_b = _hello(a, token["secret"]), _hello(b, token["secret"])
    started = time.monotonic()
    sql(a_dsn(a), f"DELETE FROM {SCHEMA}.tokens WHERE token_id = %s", token["id"])
    assert _answer(on_b, "list_combats", {}) == "ok"  # nobody was told yet
    for c in (on_a, on_b):
        assert _ended(c, REREAD_BOUND) == "token_revoked"
    took = time.monotonic() - started
    assert took < REREAD_BOUND, took
    gm_a.close()


def test_r16_tables_another_tables_token_on_another_daemon_sees_nothing_of_the_table(
    pair: tuple[Daemon, Daemon],
) -> None:
    a, b = pair
    gm_a = a.client()
    one = gm_a.call("create_table", name="One")["table"]
    two = gm_a.call("create_table", name="Two")["table"]
    narrator_one = _hello(a, gm_a.call("add_token", table=one, role="narrator")["secret"])
    combat = f"{one}/secret-lair"
    narrator_one.call("create_combat", request_id="c1", combat_id=combat, ruleset="marvel")
    narrator_two = _hello(b, gm_a.call("add_token", table=two, role="narrator")["secret"])
    assert narrator_two.call("subscribe_all")["more"] is False
    assert narrator_two.call("list_combats") == []
    missing = f"{one}/nowhere"
    for method, params in (
        ("get_combat", {"combat": combat}),
        ("history", {"combat": combat}),
        ("end_combat", {"combat": combat, "request_id": "x1"}),
    ):
        got = _answer(narrator_two, method, params)
        assert got != "ok"
        assert got[0] == "unknown_combat", (method, got)
        assert _answer(narrator_two, method, {**params, "combat": missing}) == (
            got[0],
            got[1],
            got[2].replace(combat, missing),
        )
    # Nor does it manage any table's tokens (a hosting bridge's refusal is the next test's).
    for method in ("list_tokens", "add_token"):
        got = _answer(narrator_two, method, {"table": one, "role": "observer"})
        assert got != "ok"
        assert got[:2] == ("forbidden", "method")
    # A command on table one, through A, reaches none of table two's sessions on B.
    narrator_one.call(
        "add_combatant", request_id="c2", combat=combat, id="doom", display_name="Doom"
    )
    narrator_two.sock.settimeout(1.0)
    with pytest.raises(TimeoutError):
        narrator_two.notification()
    for c in (gm_a, narrator_one, narrator_two):
        c.close()


def test_r16_tables_a_hosting_bridge_manages_on_one_daemon_what_it_made_on_the_other(
    pair: tuple[Daemon, Daemon], postgres_db: str
) -> None:
    a, b = pair
    made = turnkeeper("token", "add", "bridge", "--host", "--narrator", "--store", postgres_db)
    host_id, host_secret = made.stdout.split()[0], made.stdout.splitlines()[1]
    host_a, host_b = _hello(a, host_secret), _hello(b, host_secret)
    table = host_a.call("create_table", name="Guild")["table"]
    # B's copy may not have the table yet: a create_combat looks again before refusing...
    combat = f"{table}/brawl"
    host_b.call("create_combat", request_id="b1", combat_id=combat, ruleset="marvel")
    assert host_a.call("get_combat", combat=combat)["combat"] == combat
    # ... and so does a table method.
    second = host_a.call("create_table", name="Guild 2")["table"]
    token = host_b.call("add_token", table=second, role="player", user="peter")
    assert token["table"] == second
    # Another host's table is not this one's, on either daemon.
    other = a.client().call("create_table", name="Elsewhere")["table"]
    for host in (host_a, host_b):
        assert _answer(host, "list_tokens", {"table": other})[:2] == ("unknown_table", "table")
    # A grant taken back on the command line ends its session on both daemons.
    turnkeeper("table", "ungrant", table, host_id, "--store", postgres_db)
    for host in (host_a, host_b):
        assert _final_error(host) == "tables_changed"


def test_the_cli_manages_tables_and_tokens_in_the_database(
    pair: tuple[Daemon, Daemon], postgres_db: str, tmp_path: Path
) -> None:
    a, b = pair
    env_free = ("--store", postgres_db, "--data-dir", str(tmp_path / "cli"))
    table = turnkeeper("table", "add", "Guild", *env_free).stdout.strip()
    made = turnkeeper("token", "add", "narrator", "--table", table, *env_free).stdout
    token_id, secret = made.split()[0], made.splitlines()[1]
    assert f"{token_id} narrator - table={table}" in turnkeeper("token", "list", *env_free).stdout
    assert f"{table} Guild" in turnkeeper("table", "list", *env_free).stdout
    on_b, session = _session(b, secret)
    assert session["table"] == table
    turnkeeper("token", "revoke", token_id, *env_free)
    assert _final_error(on_b) == "token_revoked"
    assert _refused(a, secret)
    gone = turnkeeper("token", "revoke", token_id, *env_free, check=False)
    assert (gone.returncode, gone.stderr) == (1, f"turnkeeper: no token {token_id}\n")
    # Nothing of it went to a data directory's file.
    assert not (tmp_path / "cli" / "tokens.json").exists()


def test_token_import_brings_a_data_directorys_tokens_into_the_database(
    pair: tuple[Daemon, Daemon], postgres_db: str, tmp_path: Path
) -> None:
    a, _ = pair
    home = ("--data-dir", str(tmp_path / "home"))
    table = turnkeeper("table", "add", "Guild", *home).stdout.strip()
    host = turnkeeper("token", "add", "bridge", "--host", *home).stdout
    turnkeeper("table", "grant", table, host.split()[0], *home)
    player = turnkeeper("token", "add", "player", "--user", "peter", "--table", table, *home)
    secret = player.stdout.splitlines()[1]
    assert _refused(a, secret)
    done = turnkeeper("token", "import", "--store", postgres_db, *home)
    assert done.stdout.startswith("imported 1 tables and 2 tokens from ")
    _, session = _session(a, secret)
    assert (session["table"], session["user"]) == (table, "peter")
    host_a = _hello(a, host.splitlines()[1])
    assert table in {row["table"] for row in host_a.call("list_tables")}
    # Again: nothing new, nothing refused.
    again = turnkeeper("token", "import", "--store", postgres_db, *home)
    assert again.stdout.startswith("imported 0 tables and 0 tokens from ")
    # Without a PostgreSQL store there is nowhere to import to.
    nowhere = turnkeeper("token", "import", *home, check=False)
    assert nowhere.returncode == 2
    assert "token import needs --store postgresql://" in nowhere.stderr


def test_token_import_of_a_secret_the_database_has_under_another_id_is_refused_clearly(
    postgres_db: str, tmp_path: Path
) -> None:
    """A token file whose token has the secret of another token in the database (its id
    changed by hand, say): the import is refused whole with one clear line naming the token
    and exit code 2, no traceback. Before the fix, UNIQUE(hash) surfaced as a store error."""
    postgresql.migrate(postgres_db)
    home = ("--data-dir", str(tmp_path / "home"))
    made = turnkeeper("token", "add", "observer", *home).stdout
    token_id = made.split()[0]
    turnkeeper("token", "import", "--store", postgres_db, *home)
    turnkeeper("table", "add", "Guild", *home)  # new to the database: not imported either
    sql(
        postgres_db,
        f"UPDATE {SCHEMA}.tokens SET token_id = '0000beef' WHERE token_id = %s",
        token_id,
    )
    clash = turnkeeper("token", "import", "--store", postgres_db, *home, check=False)
    assert clash.returncode == 2, clash.stderr
    assert clash.stderr.splitlines() == [
        f"turnkeeper: token: token {token_id!r} has the secret of token '0000beef' in the"
        " database already"
    ]
    assert sql(postgres_db, f"SELECT token_id FROM {SCHEMA}.tokens") == [("0000beef",)]
    assert sql(postgres_db, f"SELECT count(*) FROM {SCHEMA}.tables") == [(0,)]


def test_an_existing_database_upgrades_in_place_and_keeps_its_combats(
    tmp_path: Path, postgres_db: str
) -> None:
    """A database at the schema before tables and tokens (version 6) with a combat in it:
    ``turnkeeper migrate`` adds them, the combat stays, and the CLI refuses to work on the
    database before that."""
    with postgresql._connect(postgres_db, "test") as db, db.transaction():
        db.execute(f"CREATE SCHEMA {SCHEMA}")
        db.execute(
            f"CREATE TABLE {SCHEMA}.schema_migrations (version integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in postgresql.MIGRATIONS[:6]:
            db.execute(migration.sql.encode())
            db.execute(
                f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
        db.execute(
            f"INSERT INTO {SCHEMA}.combats (combat_id, ruleset, created_at)"
            " VALUES ('old', 'marvel', 0)"
        )
    early = turnkeeper("token", "list", "--store", postgres_db, check=False)
    assert early.returncode == 1
    assert "schema version 6 keeps no tables nor tokens: run turnkeeper migrate" in early.stderr
    done = turnkeeper("migrate", "--store", postgres_db)
    assert done.stdout.startswith("applied 7: tables, their managers and tokens")
    assert turnkeeper("token", "list", "--store", postgres_db).stdout == ""
    assert sql(postgres_db, f"SELECT combat_id FROM {SCHEMA}.combats") == [("old",)]


def test_a_daemon_whose_token_sessions_are_lost_still_finds_new_tokens_and_revocations(
    pair: tuple[Daemon, Daemon],
) -> None:
    """A network blip ends B's sessions for tokens (its listener and its look-up session):
    a token made on A still works on B at once (the look-up runs again on a new session),
    and a revocation still reaches B (its listener listens again and reads what it missed)."""
    a, b = pair
    assert b.process is not None
    ended = sql(
        a_dsn(a),
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
        f"turnkeeper tokens pid {b.process.pid} %",
    )
    assert len(ended) == 2
    gm_a = a.client()
    token = gm_a.call("add_token", table="default", role="observer")
    on_b = _hello(b, token["secret"])
    gm_a.call("revoke_token", table="default", id=token["id"])
    assert _ended(on_b, REREAD_BOUND) == "token_revoked"
    gm_a.close()


def _hello_code(d: Daemon, secret: str) -> str:
    c = Client.unix(d.socket)
    try:
        c.hello(secret)
    except CallError as e:
        return e.code
    finally:
        c.close()
    return "ok"


def test_a_daemon_that_can_read_no_tokens_ends_its_token_sessions_until_it_can(
    pair: tuple[Daemon, Daemon], postgres_db: str, postgres_server: str
) -> None:
    """B's sessions for tokens are lost and new sessions refused (a connection limit,
    pg_hba, datallowconn) while another daemon's open session revokes a token: B does not
    honour the revoked token for ever on its old copy. Within STALE_SECONDS it ends its token
    sessions with tokens_unavailable and refuses token hellos; its operator's session goes
    on. Once it can read again, the revocation is in force and other tokens work.
    Before the fix, B kept serving the revoked token without bound."""
    a, b = pair
    assert b.process is not None
    gm_a = a.client()
    kept = gm_a.call("add_token", table="default", role="observer")
    revoked = gm_a.call("add_token", table="default", role="observer")
    listener = _hello(b, revoked["secret"])
    listener.call("subscribe_all")  # a session that only listens: no request to refuse
    operator = b.client()
    name = psycopg.conninfo.conninfo_to_dict(postgres_db)["dbname"]
    other = psycopg.connect(postgres_db, autocommit=True)  # another daemon's, open already
    try:
        sql(postgres_server, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        ended = other.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"turnkeeper tokens pid {b.process.pid} %",),
        ).fetchall()
        assert len(ended) == 2
        started = time.monotonic()
        with other.transaction():
            other.execute(f"DELETE FROM {SCHEMA}.tokens WHERE token_id = %s", (revoked["id"],))
            other.execute("SELECT pg_notify('turnkeeper_tokens', '')")
        assert _ended(listener, STALE_BOUND) == "tokens_unavailable"
        took = time.monotonic() - started
        assert took < STALE_BOUND, took
        assert _hello_code(b, kept["secret"]) == "tokens_unavailable"
        assert operator.call("list_tables")[0]["table"] == "default"
    finally:
        other.close()
        sql(postgres_server, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    deadline = time.monotonic() + REREAD_BOUND
    while _hello_code(b, kept["secret"]) != "ok":
        assert time.monotonic() < deadline
        time.sleep(TOKEN_CHECK_SECONDS)
    assert _hello_code(b, revoked["secret"]) == "unauthenticated"
    for c in (gm_a, operator):
        c.close()


def test_a_daemon_whose_listener_cannot_listen_again_reads_over_its_look_up_session(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listening session that cannot be opened again while the look-up session is still
    open: the copy is kept current over the look-up session, and never goes stale."""
    from turnkeeper.stores import tokens

    postgresql.migrate(postgres_db)
    daemon = SharedTokens(postgres_db)
    daemon.read()  # the look-up session, open from now on
    # Short, so that the test is: the listener's tries, a RECONNECT_PAUSE apart, each read.
    monkeypatch.setattr(tokens, "STALE_SECONDS", RECONNECT_PAUSE + 1.5)

    def refused(*args: object) -> None:
        raise psycopg.OperationalError("new connections refused")

    monkeypatch.setattr(tokens, "_connect", refused)

    async def listener_away() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.run)
            await anyio.sleep(2 * tokens.STALE_SECONDS)
            assert not daemon.stale()
            tg.cancel_scope.cancel()

    try:
        anyio.run(listener_away)
    finally:
        daemon.close()


@contextlib.contextmanager
def _tokens_unreachable(d: Daemon, dsn: str, server: str) -> Iterator[None]:
    """The database refuses new connections and ``d``'s token look-up session is ended: what
    ``d`` looks up meanwhile cannot reach the database."""
    assert d.process is not None
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as other:
        try:
            sql(server, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE %s",
                (f"turnkeeper tokens pid {d.process.pid} %",),
            )
            yield
        finally:
            sql(server, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def test_a_table_method_that_cannot_look_its_table_up_is_refused_with_tokens_unavailable(
    pair: tuple[Daemon, Daemon], postgres_db: str, postgres_server: str
) -> None:
    """A table method naming a table the copy does not have looks it up; when the database
    cannot be reached that is ``tokens_unavailable``, as for a change, not a raw
    ``store_unavailable``. Before the fix, it was ``store_unavailable``."""
    _, b = pair
    operator = b.client()
    with _tokens_unreachable(b, postgres_db, postgres_server):
        with pytest.raises(CallError) as refused:
            operator.call("list_tokens", table="t00000000zz")
        assert (refused.value.code, refused.value.field) == ("tokens_unavailable", "method")
    operator.close()


def test_a_change_committed_whose_copy_cannot_be_read_again_still_answers_its_secret(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change commits and the read of the copy after it fails: the new token is answered
    with its secret (which is kept nowhere else), not reported as failed. Before the fix, the
    committed token was answered as store_unavailable and its secret lost."""
    postgresql.migrate(postgres_db)
    book = SharedTokens(postgres_db)
    book.read()

    def lost(db: object) -> None:
        raise psycopg.OperationalError("the session was lost after the commit")

    monkeypatch.setattr(book, "_reload", lost)
    try:
        record, secret = book.add("observer")
        rows = sql(postgres_db, f"SELECT hash FROM {SCHEMA}.tokens WHERE token_id = %s", record.id)
        assert rows == [(digest(secret),)]
    finally:
        book.close()


def test_a_table_and_token_no_daemon_was_told_of_work_at_once_looked_up_on_a_miss(
    pair: tuple[Daemon, Daemon], postgres_db: str
) -> None:
    """Rows written by hand, with no notification: what a daemon's copy does not have yet is
    looked up in the database before a hello, a create_combat or a table method refuses it,
    not at the next periodic read."""
    _, b = pair
    made = turnkeeper("token", "add", "bridge", "--host", "--narrator", "--store", postgres_db)
    host_id, host_secret = made.stdout.split()[0], made.stdout.splitlines()[1]
    host = _hello(b, host_secret)
    secret = "tk_" + "x" * 43
    for table in ("t00000000a1", "t00000000a2"):
        sql(
            postgres_db,
            f"INSERT INTO {SCHEMA}.tables (table_id, name, created) VALUES (%s, 'By hand', 0)",
            table,
        )
        sql(
            postgres_db,
            f"INSERT INTO {SCHEMA}.table_managers (table_id, token_id) VALUES (%s, %s)",
            table,
            host_id,
        )
    sql(
        postgres_db,
        f"INSERT INTO {SCHEMA}.tokens (token_id, role, user_id, narrator, hash, created,"
        " table_id, host) VALUES ('0000beef', 'narrator', NULL, false, %s, 0, 't00000000a1',"
        " false)",
        digest(secret),
    )
    started = time.monotonic()
    host.call("create_combat", request_id="c1", combat_id="t00000000a2/brawl", ruleset="marvel")
    assert host.call("list_tokens", table="t00000000a1")[0]["id"] == "0000beef"
    _, session = _session(b, secret)
    assert session["table"] == "t00000000a1"
    assert time.monotonic() - started < REREAD_SECONDS


def _counting_reads(book: SharedTokens, monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """One item per whole read of ``book``'s copy from now on (the real read runs)."""
    reads: list[None] = []
    reload = book._reload

    def counted(db: Any) -> Any:
        reads.append(None)
        return reload(db)

    monkeypatch.setattr(book, "_reload", counted)
    return reads


def test_a_burst_of_changes_costs_the_other_daemon_a_few_reads_and_ends_exact(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bridge adds and revokes tokens in a loop through one daemon while the other's read
    is under way: the other takes every notification heard meanwhile together and reads
    once for them, not once each, and its copy ends as the database's (the last revoked
    token refused, the kept one known). Before the fix: one read per notification."""
    postgresql.migrate(postgres_db)
    maker, daemon = SharedTokens(postgres_db), SharedTokens(postgres_db)
    kept, kept_secret = maker.add("observer")
    daemon.read()
    changes = 60
    revoked_secret = ""

    def burst() -> None:
        nonlocal revoked_secret
        for _ in range(changes // 2):
            record, revoked_secret = maker.add("observer")
            maker.revoke(record.id)

    async def while_a_read_is_under_way() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.run)
            reads = _counting_reads(daemon, monkeypatch)
            # Held as a slow read holds it: the listener hears the first change and waits
            # in its read, while the others' notifications arrive.
            with daemon._reading:
                await anyio.to_thread.run_sync(burst)
            with anyio.fail_after(CALL_TIMEOUT):
                while daemon.load() != maker.load():
                    await anyio.sleep(0.01)
                # The copy is exact at the first read after the burst; reads owed to
                # notifications heard meanwhile would follow it back to back.
                seen = -1
                while seen != len(reads):
                    seen = len(reads)
                    await anyio.sleep(0.5)
            assert len(reads) <= 3, len(reads)
            tg.cancel_scope.cancel()

    try:
        anyio.run(while_a_read_is_under_way)
        assert daemon.authenticate(revoked_secret) is None
        found = daemon.authenticate(kept_secret)
        assert found is not None
        assert found.key == f"token:{kept.id}"
    finally:
        maker.close()
        daemon.close()


def test_a_daemons_own_changes_are_read_once_each_and_anothers_still_heard(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon reads its copy again after each change it commits; its listener does not
    read again for that change's notification, but does for another daemon's. Before the
    fix: two reads for each own change (its own notification read for again)."""
    postgresql.migrate(postgres_db)
    other, daemon = SharedTokens(postgres_db), SharedTokens(postgres_db)
    daemon.read()
    reads = _counting_reads(daemon, monkeypatch)
    changes = 20

    def own_changes() -> None:
        for _ in range(changes // 2):
            record, _ = daemon.add("observer")
            daemon.revoke(record.id)

    async def changing() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.run)  # one read as it listens
            await anyio.to_thread.run_sync(own_changes)
            record, _ = await anyio.to_thread.run_sync(other.add, "observer")
            with anyio.fail_after(CALL_TIMEOUT):
                while record.id not in {r.id for r in daemon.load().tokens}:
                    await anyio.sleep(0.01)
                seen = -1
                while seen != len(reads):
                    seen = len(reads)
                    await anyio.sleep(0.5)
            assert len(reads) == 1 + changes + 1, len(reads)
            tg.cancel_scope.cancel()

    try:
        anyio.run(changing)
    finally:
        other.close()
        daemon.close()


def test_an_own_change_whose_read_failed_is_read_by_the_listener(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read after a daemon's own commit fails: its listener, which does not read for
    its own notifications, reads for that one, well before the periodic look."""
    from turnkeeper.stores import tokens

    postgresql.migrate(postgres_db)
    daemon = SharedTokens(postgres_db)
    daemon.read()
    monkeypatch.setattr(tokens, "REREAD_SECONDS", 10 * CALL_TIMEOUT)
    reload = daemon._reload
    failed: list[None] = []

    def once_lost_after_the_commit(db: Any) -> Any:
        if not failed and threading.current_thread().name != "turnkeeper-tokens":
            failed.append(None)
            raise psycopg.OperationalError("the session was lost after the commit")
        return reload(db)

    monkeypatch.setattr(daemon, "_reload", once_lost_after_the_commit)

    async def changing() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.run)
            record, _ = await anyio.to_thread.run_sync(daemon.add, "observer")
            assert failed
            with anyio.fail_after(CALL_TIMEOUT):
                while record.id not in {r.id for r in daemon.load().tokens}:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()

    try:
        anyio.run(changing)
    finally:
        daemon.close()


def test_a_token_revoked_at_the_end_of_a_burst_on_one_daemon_is_refused_on_the_other(
    pair: tuple[Daemon, Daemon],
) -> None:
    """A bridge loops add_token and revoke_token on A: B, taking the burst's notifications
    together, still ends with the database's tokens: the session of the token revoked last
    ends, its hello is refused, and a token kept through the burst still works."""
    a, b = pair
    gm_a = a.client()
    kept = gm_a.call("add_token", table="default", role="observer")
    last = gm_a.call("add_token", table="default", role="observer")
    listener = _hello(b, last["secret"])
    listener.call("subscribe_all")  # a session that only listens: no request to refuse
    for _ in range(30):
        made = gm_a.call("add_token", table="default", role="observer")
        gm_a.call("revoke_token", table="default", id=made["id"])
    gm_a.call("revoke_token", table="default", id=last["id"])
    assert _final_error(listener) == "token_revoked"
    assert _refused(b, last["secret"])
    assert _hello_code(b, kept["secret"]) == "ok"
    gm_a.close()


def test_a_table_the_database_does_not_have_is_looked_up_without_a_whole_read(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table method naming a table the copy lacks looks that table up alone: made-up
    tables (a hostile or buggy bridge's loop) cost no whole read, so they cannot keep the
    look-up thread the hellos share reading; a table made through another daemon is read
    once, however many requests name it. Before the fix: a whole read for each."""
    postgresql.migrate(postgres_db)
    maker, daemon = SharedTokens(postgres_db), SharedTokens(postgres_db)
    daemon.read()
    reads = _counting_reads(daemon, monkeypatch)

    async def named(tables: list[str]) -> None:
        for table in tables:
            await daemon.refresh(table)

    try:
        anyio.run(named, [f"t{n:010x}" for n in range(100)])
        assert reads == []
        made = maker.add_table("Guild")
        anyio.run(named, [made.id] * 10)
        assert len(reads) == 1
        assert made.id in daemon.load().table_ids()
    finally:
        maker.close()
        daemon.close()


def test_a_create_combat_that_cannot_look_its_table_up_is_refused_with_tokens_unavailable(
    pair: tuple[Daemon, Daemon], postgres_db: str, postgres_server: str
) -> None:
    """The operator's create_combat naming a table the copy does not have looks it up; when
    the database cannot be reached that is ``tokens_unavailable`` (field ``combat_id``), as
    for a table method's look-up, and nothing is created. Before the fix: store_unavailable."""
    _, b = pair
    operator = b.client()
    with _tokens_unreachable(b, postgres_db, postgres_server):
        with pytest.raises(CallError) as refused:
            operator.call(
                "create_combat",
                request_id="c1",
                combat_id="t00000000ff/brawl",
                ruleset="marvel",
            )
        assert (refused.value.code, refused.value.field) == ("tokens_unavailable", "combat_id")
    operator.close()
