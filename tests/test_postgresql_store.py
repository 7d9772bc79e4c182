"""What only the PostgreSQL store does, on a real server: migrations, many daemons per database,
the log's own end kept with each combat, reconnecting, the throwaway cluster the tests fall
back on, and a real ``turnkeeper serve --store postgresql://`` killed with SIGKILL."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

import postgres
from daemon import CALL_TIMEOUT, CallError, Client, Daemon, add_spidey
from test_store_port import batch, event, loaded, logged, running
from turnkeeper.store import REQUEST_MEMORY_SECONDS, StoreError
from turnkeeper.stores import open_store, postgresql
from turnkeeper.stores.postgresql import SCHEMA, SCHEMA_VERSION, PostgresStore, migrate
from turnkeeper_sdk import wire


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sql(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def test_many_stores_open_one_database_each_listed_as_a_daemon(postgres_db: str) -> None:
    first = PostgresStore.open(postgres_db, address="127.0.0.1:7616")
    second = PostgresStore.open(postgres_db)
    try:
        listed = _sql(postgres_db, f"SELECT daemon_id, address FROM {SCHEMA}.daemons")
        assert sorted(listed, key=str) == sorted(
            [(first.daemon_id, "127.0.0.1:7616"), (second.daemon_id, None)], key=str
        )
    finally:
        first.close()
    # A clean close takes its row away.
    assert _sql(postgres_db, f"SELECT daemon_id FROM {SCHEMA}.daemons") == [(second.daemon_id,)]
    second.close()


def test_a_migration_waits_for_the_lock_another_holds(postgres_db: str) -> None:
    """Two daemons starting at once on a new database: the second's migration waits for the
    first's (``STORE_LOCK``, held for its transaction), then finds nothing left to apply."""
    holder = psycopg.connect(postgres_db, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (postgresql.STORE_LOCK,))
    letting_go = threading.Timer(0.3, holder.close)
    letting_go.start()
    try:
        PostgresStore.open(postgres_db).close()
    finally:
        letting_go.join()


def test_a_database_at_a_newer_schema_version_is_refused(postgres_db: str) -> None:
    PostgresStore.open(postgres_db).close()
    _sql(postgres_db, f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (99, 'x')")
    with pytest.raises(StoreError) as refused:
        PostgresStore.open(postgres_db)
    assert f"schema version 99, this daemon reads up to {SCHEMA_VERSION}" in str(refused.value)


def test_a_server_older_than_postgresql_13_is_refused_by_migrate_and_open(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change stamps need PostgreSQL 13 (``xid8``): an older server is refused with its
    version and the one needed, before any migration (here the server is made to look old by
    asking for one newer than it)."""
    with psycopg.connect(postgres_db) as db:
        server = db.info.server_version
    monkeypatch.setattr(postgresql, "MIN_SERVER_VERSION", (server // 10000 + 1) * 10000)
    for opening in (migrate, PostgresStore.open):
        with pytest.raises(StoreError) as refused:
            opening(postgres_db)
        assert refused.value.code == "store_failed"
        assert f"is too old, the store needs {server // 10000 + 1} or newer" in str(refused.value)
    assert _sql(postgres_db, "SELECT to_regclass(%s)", f"{SCHEMA}.schema_migrations") == [(None,)]


def _migrate(dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", "migrate", "--store", dsn],
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT,
        check=False,
    )


def test_turnkeeper_migrate_applies_each_migration_once(postgres_db: str) -> None:
    first = _migrate(postgres_db)
    again = _migrate(postgres_db)
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    assert first.stdout.startswith("applied 1: combats, events")
    assert "applied" not in again.stdout
    assert f"is at schema version {SCHEMA_VERSION}" in again.stdout
    versions = _sql(postgres_db, f"SELECT version FROM {SCHEMA}.schema_migrations ORDER BY 1")
    assert versions == [(m.version,) for m in postgresql.MIGRATIONS]


def test_turnkeeper_migrate_needs_a_postgresql_uri(tmp_path: Path) -> None:
    done = _migrate(str(tmp_path))
    assert done.returncode == 2
    assert "--store: expected a postgresql:// URI" in done.stderr


@pytest.mark.anyio
async def test_events_lost_at_the_end_of_a_log_quarantine_its_combat(
    postgres_db: str, tmp_path: Path
) -> None:
    store = PostgresStore.open(postgres_db)
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
        await store.commit(batch("c2", 1, 2, create=True))
    store.close()
    # The end of a log, where SQLite could not tell a loss from a log that ended there.
    _sql(postgres_db, f"DELETE FROM {SCHEMA}.events WHERE combat_id = 'c1' AND seq = 3")

    store = open_store(postgres_db, tmp_path / "data")
    c1, c2 = loaded(store)
    store.close()
    assert c1.quarantined == "seq 3 is missing (the log should end at seq 3)"
    assert c2.quarantined is None


def _end_sessions(dsn: str) -> int:
    """End every session of the store, as a server restart would; how many there were."""
    return len(
        _sql(
            dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'turnkeeper %%'",
        )
    )


@pytest.mark.anyio
async def test_the_store_reconnects_after_its_sessions_are_ended_and_loses_nothing(
    postgres_db: str,
) -> None:
    store = PostgresStore.open(postgres_db)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r1"), response="one"))
        # The committer's, the reader's, the loader's and the leases'.
        assert _end_sessions(postgres_db) == 4
        # Gone before its COMMIT was sent, the transaction kept nothing: a new session (with
        # the lock taken again) writes it.
        await store.commit(batch("c1", 2))
        # A read is run again on a new session: the reader never sees the loss.
        assert [seq for seq, _ in await store.events_after("c1", 0, 10)] == [1, 2]
        assert _end_sessions(postgres_db) == 2  # the loader's is still the ended one
        assert await store.events_after("c1", 1, 10) == [(2, event(2))]
        assert await store.lookup_request("alice", "r1") == ("c1", "one")
        assert [c for c, _ in store.summaries()] == ["c1"]
        await store.commit(batch("c1", 3))
    [combat] = loaded(store)
    assert logged(store, combat) == [(n, event(n)) for n in (1, 2, 3)]
    store.close()


def test_the_throwaway_cluster_starts_from_the_installed_binaries() -> None:
    async def use(dsn: str) -> None:
        store = PostgresStore.open(dsn)
        async with running(store):
            await store.commit(batch("c1", 1, 2, create=True))
        store.close()

    with postgres.throwaway_cluster() as server, postgres.database(server) as dsn:
        assert not server.startswith(postgres.LOCAL.rsplit("/", 1)[0] + "/")
        anyio.run(use, dsn)
        assert _sql(dsn, f"SELECT seq FROM {SCHEMA}.events ORDER BY seq") == [(1,), (2,)]


def test_serve_on_postgresql_keeps_every_acknowledged_command_through_a_sigkill(
    tmp_path: Path, postgres_db: str
) -> None:
    d = Daemon(tmp_path, None, "--store", postgres_db)
    d.start()
    try:
        c = d.client()
        add_spidey(c, "bank")
        started = c.call("start_combat", request_id="bank-start", combat="bank")
        seq = c.call("get_combat", combat="bank")["seq"]
        for n in range(20):  # acknowledged, each one: then the kill
            c.call("create_combat", request_id=f"make-{n}", combat_id=f"c{n}", ruleset="marvel")
        c.close()
        d.kill()

        d.start()
        c = d.client()
        assert c.call("get_combat", combat="bank")["seq"] == seq
        listed = {row["combat"] for row in c.call("list_combats")}
        assert listed == {"bank", *(f"c{n}" for n in range(20))}
        # A retried request id returns the original result, and changes nothing.
        assert c.call("start_combat", request_id="bank-start", combat="bank") == started
        assert c.call("get_combat", combat="bank")["seq"] == seq
        c.close()
        assert d.stop() == 0
    finally:
        if d.process is not None and d.process.poll() is None:
            d.process.kill()
            d.process.wait()
    assert not (tmp_path / "data" / "turnkeeper.db").exists()  # nothing went to SQLite


def test_a_commit_whose_session_is_lost_after_its_commit_is_found_landed() -> None:
    # A server of the test's own: it is made to hold every COMMIT (waiting for a synchronous
    # standby that never comes) while the committer's session is ended, so the transaction is
    # committed on the server and its answer lost on the way back.
    with postgres.throwaway_cluster() as server, postgres.database(server) as dsn:
        anyio.run(_lost_after_commit, server, dsn)


async def _lost_after_commit(server: str, dsn: str) -> None:
    store = PostgresStore.open(dsn)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        _sql(server, "ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        _sql(server, "SELECT pg_reload_conf()")
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.commit, batch("c1", 2, 2, request=("alice", "r"), response=2))
            with anyio.fail_after(CALL_TIMEOUT):
                while (
                    _sql(dsn, "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == []
                ):
                    await anyio.sleep(0.01)
            assert _end_sessions(dsn) == 4
            _sql(server, "ALTER SYSTEM RESET synchronous_standby_names")
            _sql(server, "SELECT pg_reload_conf()")
        # The commit returned without an error: the combat row said it had landed.
        assert await store.lookup_request("alice", "r") == ("c1", 2)
        await store.commit(batch("c1", 4))  # and the committer knows where the log ends
    [combat] = loaded(store)
    assert logged(store, combat) == [(n, event(n)) for n in (1, 2, 3, 4)]
    store.close()


def test_serve_on_postgresql_quarantines_a_damaged_combat_alone(
    tmp_path: Path, postgres_db: str
) -> None:
    d = Daemon(tmp_path, None, "--store", postgres_db)
    d.start()
    try:
        c = d.client()
        for combat in ("unreadable", "deleted", "good"):
            add_spidey(c, combat)
            c.call("start_combat", request_id=f"{combat}-start", combat=combat)
        last = c.call("get_combat", combat="good")["seq"]
        c.close()
        d.kill()
        where = "WHERE combat_id = %s AND seq = %s"
        _sql(
            postgres_db,
            f"UPDATE {SCHEMA}.events SET body = %s {where}",
            b"\x92",
            "unreadable",
            last,
        )
        _sql(postgres_db, f"DELETE FROM {SCHEMA}.events {where}", "deleted", last)

        d.start()
        c = d.client()
        unreadable = _refused(c, "unreadable")
        assert unreadable.code == "combat_quarantined"
        assert f"event {last} is unreadable" in unreadable.message
        deleted = _refused(c, "deleted")
        assert deleted.code == "combat_quarantined"
        assert f"seq {last} is missing" in deleted.message
        assert c.call("get_combat", combat="good")["seq"] == last
        c.close()
    finally:
        if d.process is not None and d.process.poll() is None:
            d.process.kill()
            d.process.wait()


def _refused(c: Client, combat: str) -> CallError:
    with pytest.raises(CallError) as refused:
        c.call("get_combat", combat=combat)
    return refused.value


async def _held_in_syncrep(cluster: postgres.Cluster, dsn: str) -> None:
    """Have the server hold every COMMIT (waiting for a synchronous standby that never comes)
    and return once one is held: committed on the server, unanswered."""
    _sql(cluster.dsn, "ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    _sql(cluster.dsn, "SELECT pg_reload_conf()")
    with anyio.fail_after(CALL_TIMEOUT):
        while _sql(dsn, "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == []:
            await anyio.sleep(0.01)


def _restart_without_standby(cluster: postgres.Cluster) -> None:
    cluster.start(options="-c synchronous_standby_names=")
    _sql(cluster.dsn, "ALTER SYSTEM RESET synchronous_standby_names")


def test_a_commit_held_while_the_server_restarts_is_found_landed_once_it_is_back() -> None:
    # The server stops (fast) with the COMMIT sent: the session is lost and, for a moment, no
    # new one can be had. The committer keeps trying, and finds the group committed.
    with postgres.controlled_cluster() as cluster, postgres.database(cluster.dsn) as dsn:
        anyio.run(_restarted_while_committing, cluster, dsn)


async def _restarted_while_committing(cluster: postgres.Cluster, dsn: str) -> None:
    # A lease that outlives the outage: a shorter one fences the combat meanwhile (its next
    # commit refused with combat_moved, and the daemon reloads it: see test_leases).
    store = PostgresStore.open(dsn, lease_seconds=60)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.commit, batch("c1", 2, 2, request=("alice", "r"), response=2))
            await _held_in_syncrep(cluster, dsn)
            await anyio.to_thread.run_sync(cluster.stop)
            await anyio.sleep(1)
            await anyio.to_thread.run_sync(_restart_without_standby, cluster)
        # The commit returned without an error: it was found landed once the server was back.
        assert await store.lookup_request("alice", "r") == ("c1", 2)
        await store.commit(batch("c1", 4))
    [combat] = loaded(store)
    assert logged(store, combat) == [(n, event(n)) for n in (1, 2, 3, 4)]
    store.close()


def test_a_commit_whose_outcome_stays_unknown_is_unavailable_and_its_retry_finds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server stays down longer than the committer waits: the outcome is unknown, never
    # "nothing kept". Once the server is back, the request id is looked up in the database
    # (its first answer returned) and the combat's next append is checked against it.
    monkeypatch.setattr(postgresql, "LANDED_WAIT", 1.0)
    with postgres.controlled_cluster() as cluster, postgres.database(cluster.dsn) as dsn:
        anyio.run(_down_while_committing, cluster, dsn)


async def _down_while_committing(cluster: postgres.Cluster, dsn: str) -> None:
    store = PostgresStore.open(dsn, lease_seconds=60)  # outlives the outage, as above
    outcome: list[StoreError] = []

    async def commit() -> None:
        try:
            await store.commit(batch("c1", 2, 2, request=("alice", "r"), response=2))
        except StoreError as e:
            outcome.append(e)

    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        async with anyio.create_task_group() as tg:
            tg.start_soon(commit)
            await _held_in_syncrep(cluster, dsn)
            await anyio.to_thread.run_sync(cluster.stop)
        [unknown] = outcome
        assert unknown.code == "store_unavailable"
        assert "retry" in unknown.message
        assert str(cluster.port) not in unknown.message
        await anyio.to_thread.run_sync(_restart_without_standby, cluster)
        assert await store.lookup_request("alice", "r") == ("c1", 2)
        await store.commit(batch("c1", 4))
    [combat] = loaded(store)
    assert logged(store, combat) == [(n, event(n)) for n in (1, 2, 3, 4)]
    store.close()


def test_serve_through_a_database_outage_quarantines_nothing_and_tells_no_address(
    tmp_path: Path,
) -> None:
    with postgres.controlled_cluster() as cluster, postgres.database(cluster.dsn) as dsn:
        d = Daemon(tmp_path, None, "--store", dsn)
        d.start()
        try:
            c = d.client()
            add_spidey(c, "bank")
            seq = c.call("get_combat", combat="bank")["seq"]
            cluster.stop()
            refusals = []
            for method, params in (
                ("history", {"combat": "bank"}),
                # Refused at its request id's lookup, which reads the database (another daemon
                # may have stored it), before anything of it is applied.
                ("start_combat", {"request_id": "bank-start", "combat": "bank"}),
            ):
                with pytest.raises(CallError) as refused:
                    c.call(method, **params)
                refusals.append(refused.value)
            assert [r.code for r in refusals] == ["store_unavailable"] * 2
            for r in refusals:
                assert "127.0.0.1" not in r.message
                assert str(cluster.port) not in r.message
            cluster.start()
            assert c.call("get_combat", combat="bank")["seq"] == seq
            assert [e["seq"] for e in c.call("history", combat="bank")["events"]] == list(
                range(1, seq + 1)
            )
            started = c.call("start_combat", request_id="bank-start", combat="bank")
            assert started["seq"] > seq
            assert all("quarantined" not in row for row in c.call("list_combats"))
            c.close()
        finally:
            if d.process is not None and d.process.poll() is None:
                d.process.kill()
                d.process.wait()


def test_a_history_read_the_server_never_answers_stalls_no_other_request(
    tmp_path: Path,
) -> None:
    with postgres.controlled_cluster() as cluster, postgres.database(cluster.dsn) as dsn:
        d = Daemon(tmp_path, None, "--store", dsn)
        d.start()
        try:
            c = d.client()
            add_spidey(c, "bank")
            seq = c.call("get_combat", combat="bank")["seq"]
            [(reader,)] = _sql(
                dsn,
                "SELECT pid FROM pg_stat_activity"
                " WHERE application_name LIKE 'turnkeeper reader%%'",
            )
            os.kill(reader, signal.SIGSTOP)  # the reader's backend: alive, never answering
            try:
                stuck = d.client()
                stuck.send_raw(
                    wire.pack(wire.Request(7, "history", {"combat": "bank", "after": 0}))
                )
                time.sleep(0.2)  # the history read is on its way to the stopped backend
                started = time.monotonic()
                assert c.call("get_combat", combat="bank")["seq"] == seq
                assert time.monotonic() - started < 1.0
                refused = stuck.response(7).error
                assert refused is not None
                assert refused.code == "store_unavailable"
            finally:
                os.kill(reader, signal.SIGCONT)
            c.close()
            stuck.close()
        finally:
            if d.process is not None and d.process.poll() is None:
                d.process.kill()
                d.process.wait()


def test_a_write_the_server_never_answers_is_written_again_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgresql, "WRITE_TIMEOUT", 1.0)
    with postgres.controlled_cluster() as cluster, postgres.database(cluster.dsn) as dsn:
        anyio.run(_hung_committer, dsn)


async def _hung_committer(dsn: str) -> None:
    store = PostgresStore.open(dsn)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        [(committer,)] = _sql(
            dsn,
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'turnkeeper committer%%'",
        )
        os.kill(committer, signal.SIGSTOP)
        try:
            # The stopped session had nothing of the transaction but its first statement: its
            # socket severed after WRITE_TIMEOUT, the group is written again on a new session
            # (the stopped one holds no lock, and the append is fenced whatever it does next).
            with anyio.fail_after(CALL_TIMEOUT):
                await store.commit(batch("c1", 2))
        finally:
            os.kill(committer, signal.SIGCONT)
        with anyio.fail_after(CALL_TIMEOUT):
            while _sql(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", committer):
                await anyio.sleep(0.1)  # the severed session ends once its backend runs again
        await store.commit(batch("c1", 3))
    [combat] = loaded(store)
    assert logged(store, combat) == [(n, event(n)) for n in (1, 2, 3)]
    store.close()


def _serve(data_dir: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    """``turnkeeper serve --store`` expected to refuse at start-up: its exit and what it said."""
    argv = [sys.executable, "-m", "turnkeeper.cli", "serve", "--store", dsn]
    argv += ["--data-dir", str(data_dir), "--socket", str(data_dir.parent / "run" / "tk.sock")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT)


def test_serve_on_postgresql_refuses_a_data_directory_others_may_write_in(
    tmp_path: Path, postgres_db: str
) -> None:
    loose = tmp_path / "data"
    loose.mkdir()
    os.chmod(loose, 0o777)
    refused = _serve(loose, postgres_db)
    assert refused.returncode == 1
    assert f"{loose} has mode 0777: other users may write in it" in refused.stderr
    assert os.listdir(loose) == []


def test_a_second_daemon_on_the_same_data_directory_refuses_though_its_database_differs(
    tmp_path: Path, postgres_server: str, postgres_db: str
) -> None:
    d = Daemon(tmp_path, None, "--store", postgres_db)
    d.start()
    try:
        assert d.process is not None
        with postgres.database(postgres_server) as other:
            second = _serve(d.data_dir, other)
        assert second.returncode == 1
        assert f"{d.data_dir} is in use by another turnkeeper daemon (pid {d.process.pid})" in (
            second.stderr
        )
    finally:
        if d.process is not None and d.process.poll() is None:
            d.process.kill()
            d.process.wait()


def test_a_role_that_may_not_create_opens_an_up_to_date_store() -> None:
    with postgres.controlled_cluster() as cluster, postgres.database(cluster.dsn) as dsn:
        PostgresStore.open(dsn).close()  # migrated by the owner
        # The least a daemon needs: its tables' rows and the identity column's sequence.
        for statement in (
            "CREATE ROLE daemon LOGIN",
            f"GRANT USAGE ON SCHEMA {SCHEMA} TO daemon",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {SCHEMA} TO daemon",
            f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO daemon",
        ):
            _sql(dsn, statement)
        least = dsn.replace("postgres@", "daemon@", 1)

        async def use() -> None:
            store = PostgresStore.open(least)
            async with running(store):
                await store.commit(batch("c1", 1, 2, create=True))
            store.close()

        anyio.run(use)
        assert _sql(dsn, f"SELECT seq FROM {SCHEMA}.events ORDER BY seq") == [(1,), (2,)]


def test_a_newer_migration_is_refused_while_a_daemon_runs_on_the_store(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = PostgresStore.open(postgres_db)
    newer = postgresql.Migration(
        SCHEMA_VERSION + 1, "a column", f"ALTER TABLE {SCHEMA}.combats ADD COLUMN x int"
    )
    monkeypatch.setattr(postgresql, "MIGRATIONS", (*postgresql.MIGRATIONS, newer))
    monkeypatch.setattr(postgresql, "SCHEMA_VERSION", newer.version)
    try:
        for attempt in (partial(PostgresStore.open, postgres_db), partial(migrate, postgres_db)):
            with pytest.raises(StoreError) as refused:
                attempt()
            assert "in use by another turnkeeper daemon" in str(refused.value)
        assert _sql(postgres_db, f"SELECT max(version) FROM {SCHEMA}.schema_migrations") == [
            (SCHEMA_VERSION,)
        ]
    finally:
        first.close()
    PostgresStore.open(postgres_db).close()  # the lock is free: now it is applied
    assert _sql(postgres_db, f"SELECT max(version) FROM {SCHEMA}.schema_migrations") == [
        (newer.version,)
    ]


@pytest.mark.parametrize(
    "location",
    [
        "postgresql://tk:s3cr%zzet@127.0.0.1:1/tk",  # libpq quotes the token it cannot decode
        "postgresql://tk:s3cr%21et@127.0.0.1:1/tk",  # parses, and no server answers
    ],
)
def test_the_password_never_shows_in_what_migrate_and_serve_say(
    tmp_path: Path, location: str
) -> None:
    for done in (_migrate(location), _serve(tmp_path / "data", location)):
        assert done.returncode == 1
        said = done.stdout + done.stderr
        assert "cannot" in said
        assert "s3cr" not in said


@pytest.mark.anyio
async def test_a_log_past_its_combat_rows_last_seq_quarantines_that_combat(
    postgres_db: str,
) -> None:
    store = PostgresStore.open(postgres_db)
    async with running(store):
        await store.commit(batch("c1", 1, 3, create=True))
        await store.commit(batch("c2", 1, 2, create=True))
    store.close()
    # Events the store's conditional appends did not record: written around them.
    _sql(postgres_db, f"UPDATE {SCHEMA}.combats SET last_seq = 1 WHERE combat_id = 'c1'")
    store = PostgresStore.open(postgres_db)
    c1, c2 = loaded(store)
    store.close()
    assert c1.quarantined == "the log ends at seq 3, past its combat's last seq 1"
    assert (c2.quarantined, c2.last) == (None, 2)


def test_a_daemon_whose_sessions_are_lost_serves_on_with_the_leases_it_held(
    tmp_path: Path, postgres_db: str
) -> None:
    """A network blip ends every session: the daemon's next command goes through on new ones,
    its lease on the combat still its own (its epoch unchanged: nobody acquired it)."""
    d = Daemon(tmp_path, None, "--store", postgres_db)
    d.start()
    try:
        c = d.client()
        add_spidey(c, "bank")
        # With the listener for followed combats, and the tokens' listener and session.
        assert _end_sessions(postgres_db) == 7
        started = c.call("start_combat", request_id="bank-start", combat="bank")
        assert started["seq"] > 2
        assert _sql(postgres_db, f"SELECT owner_epoch FROM {SCHEMA}.combats") == [(1,)]
    finally:
        if d.process is not None and d.process.poll() is None:
            d.process.kill()
            d.process.wait()


@pytest.mark.anyio
async def test_every_write_transaction_commits_synchronously_whatever_the_default(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = postgres_db.rsplit("/", 1)[1]
    _sql(postgres_db, f"ALTER DATABASE {name} SET synchronous_commit = off")
    seen: list[str] = []
    write_together = PostgresStore._write_together
    write_batch = PostgresStore._write_batch

    def together(self: PostgresStore, group: Any) -> None:
        seen.append(self._writer.execute("SHOW synchronous_commit").fetchone()[0])
        write_together(self, group)

    def alone(self: PostgresStore, pending: Any) -> None:
        seen.append(self._writer.execute("SHOW synchronous_commit").fetchone()[0])
        write_batch(self, pending)

    monkeypatch.setattr(PostgresStore, "_write_together", together)
    monkeypatch.setattr(PostgresStore, "_write_batch", alone)
    store = PostgresStore.open(postgres_db)
    async with running(store):
        await store.commit(batch("c1", 1, create=True, request=("alice", "r"), response=1))
        with pytest.raises(StoreError):  # refused together, then written batch by batch
            await store.commit(batch("c1", 2, request=("alice", "r"), response=2))
    store.close()
    assert seen == ["on", "on", "on"]


@pytest.mark.anyio
async def test_the_quota_counts_a_snapshots_bytes(postgres_db: str) -> None:
    store = PostgresStore.open(postgres_db)
    size = store._size()
    store.close()
    store = PostgresStore.open(postgres_db, max_bytes=size + 64 * 2**10)
    blob = os.urandom(256 * 2**10)  # TOAST would compress a pattern
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        with pytest.raises(StoreError) as full:
            await store.commit(dataclasses.replace(batch("c1", 2), snapshot=lambda: blob))
        assert full.value.code == "store_full"
    store.close()


@pytest.mark.anyio
async def test_a_session_lost_before_the_quota_is_measured_is_replaced(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgresql, "QUOTA_MEASURE_BYTES", 0)  # measured before every commit
    store = PostgresStore.open(postgres_db, max_bytes=2**30)
    async with running(store):
        await store.commit(batch("c1", 1, create=True))
        _sql(
            postgres_db,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name LIKE 'turnkeeper committer%%'",
        )
        await store.commit(batch("c1", 2))
    [combat] = loaded(store)
    assert logged(store, combat) == [(1, event(1)), (2, event(2))]
    store.close()


def test_a_session_ended_idle_in_its_transaction_is_lost_not_a_refusal(postgres_db: str) -> None:
    """A daemon paused mid-transaction past ``idle_in_transaction_session_timeout`` finds its
    session ended with an error psycopg files as InternalError: the store must treat it as a lost
    session (retryable ``store_unavailable``), not as a statement the database refused
    (``store_failed``), which a client is told not to retry."""
    with psycopg.connect(postgres_db) as db:
        db.execute("SET idle_in_transaction_session_timeout = '50ms'")
        db.execute("SELECT 1")  # the transaction begins
        time.sleep(0.5)
        with pytest.raises(psycopg.Error) as ended:
            db.execute("SELECT 1")
    assert isinstance(ended.value, psycopg.errors.IdleInTransactionSessionTimeout)
    assert isinstance(ended.value, postgresql.LOST)
    assert postgresql._error(ended.value, postgres_db).code == "store_unavailable"


def _changed(store: PostgresStore, watermark: int) -> list[tuple[str, int, str, int]]:
    """Every combat changed from ``watermark`` on, read two at a time."""
    rows, changed, after = [], watermark, ""
    while True:
        _, page = store.changed_since(changed, after, 2)
        rows += page
        if len(page) < 2:
            return rows
        after, changed = page[-1][0], page[-1][3]


@pytest.mark.anyio
async def test_a_change_committed_after_a_later_one_is_found_from_the_watermark(
    postgres_db: str,
) -> None:
    """Which combats changed since a watermark, a page at a time, each once, in order of
    change: a commit whose transaction began before the watermark was read and ends after
    later ones is found from it."""
    store = PostgresStore.open(postgres_db)
    try:
        async with running(store):
            for combat in ("a", "b", "c", "slow"):
                await store.commit(batch(combat, 1, 1, create=True))
            with psycopg.connect(postgres_db) as early:
                # Its transaction id comes before the watermark and the commits below.
                early.execute("SELECT pg_current_xact_id()")
                watermark = store.horizon()
                for combat in ("c", "a", "b"):
                    await store.commit(batch(combat, 2, 1))
                before = _changed(store, watermark)
                early.execute(
                    f"UPDATE {SCHEMA}.combats SET last_seq = 7, changed = pg_current_xact_id()"
                    " WHERE combat_id = 'slow'"
                )
            after = _changed(store, watermark)
    finally:
        store.close()
    # Other sessions on the server may hold the watermark further back: "slow" made earlier.
    ours = [(c, s) for c, s, _, _ in before if c != "slow"]
    assert ours == [("c", 2), ("a", 2), ("b", 2)]
    assert [row[3] for row in before] == sorted(row[3] for row in before)
    assert len({row[0] for row in before}) == len(before)
    assert {c: s for c, s, _, _ in after} == {"a": 2, "b": 2, "c": 2, "slow": 7}


@pytest.mark.anyio
async def test_change_stamps_a_restore_brought_from_another_cluster_are_set_back_at_open(
    postgres_db: str,
) -> None:
    """A dump restored into a new cluster brings transaction ids its counter has not reached:
    opening the store sets them back, so the followers' poll finds none of those combats
    changed (it would read them all again at every poll until the ids caught up)."""
    store = PostgresStore.open(postgres_db)
    try:
        async with running(store):
            for combat in ("a", "b"):
                await store.commit(batch(combat, 1, 1, create=True))
    finally:
        store.close()
    _sql(  # as the old cluster stamped them: far past this one's transaction ids
        postgres_db,
        f"UPDATE {SCHEMA}.combats"
        " SET changed = ((pg_current_xact_id()::text)::bigint + 1000000000)::text::xid8",
    )
    store = PostgresStore.open(postgres_db)
    try:
        watermark = store.horizon()
        assert _changed(store, watermark) == []
        async with running(store):
            await store.commit(batch("c", 1, 1, create=True))
        assert [c for c, _, _, _ in _changed(store, watermark)] == ["c"]
    finally:
        store.close()


class _SteppedClock:
    """The ``time`` module as the store sees it, its wall clock stepped ``by`` seconds (NTP,
    or the daemon now facing a server whose clock differs, after a failover)."""

    def __init__(self, by: float) -> None:
        self.by = by

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + self.by


@pytest.mark.anyio
async def test_a_request_id_is_stamped_by_the_server_whatever_the_daemons_clock_did_since(
    postgres_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon's wall clock that steps after its first commit (or a failover to a server
    whose clock is another) leaves the stamps of its request ids right: the server stamps
    them, no offset from the daemon's clock is kept."""
    store = PostgresStore.open(postgres_db)
    try:
        async with running(store):
            await store.commit(batch("c1", 1, create=True, request=("al", "before"), response=1))
            monkeypatch.setattr(postgresql, "time", _SteppedClock(2 * REQUEST_MEMORY_SECONDS))
            await store.commit(batch("c1", 2, request=("al", "after"), response=2))
            rows = _sql(
                postgres_db,
                "SELECT request_id, abs(at - extract(epoch FROM now())) < 60"
                f" FROM {SCHEMA}.requests ORDER BY request_id",
            )
            assert rows == [("after", True), ("before", True)]
    finally:
        store.close()


@pytest.mark.anyio
async def test_request_ids_are_stamped_and_pruned_by_the_servers_clock_not_a_daemons(
    postgres_db: str,
) -> None:
    """A daemon whose wall clock runs two days ahead (its commands' times with it) prunes no
    other daemon's request ids: each id is stamped with the server's time, and pruned once
    older than a day by the server's clock, whichever daemon prunes."""
    here = PostgresStore.open(postgres_db)
    ahead = PostgresStore.open(postgres_db)
    try:
        async with running(here), running(ahead):
            await here.commit(batch("c1", 1, create=True, request=("al", "kept"), response=1))
            await here.commit(batch("c1", 2, request=("al", "old"), response=2))
            _sql(  # stored two days ago, by the server's clock
                postgres_db,
                f"UPDATE {SCHEMA}.requests SET at = extract(epoch FROM now()) - 2 * %s"
                " WHERE request_id = 'old'",
                REQUEST_MEMORY_SECONDS,
            )
            future = time.time() + 2 * REQUEST_MEMORY_SECONDS
            made = batch("c2", 1, create=True, request=("al", "ahead"), response=3, at=future)
            await ahead.commit(made)
            await ahead._committer.run(ahead._prune)
            rows = _sql(
                postgres_db,
                "SELECT request_id, abs(at - extract(epoch FROM now())) < 60"
                f" FROM {SCHEMA}.requests ORDER BY request_id",
            )
            assert rows == [("ahead", True), ("kept", True)]
            assert await ahead.lookup_request("al", "kept") == ("c1", 1)
    finally:
        here.close()
        ahead.close()
