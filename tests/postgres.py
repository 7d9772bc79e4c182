"""A real PostgreSQL for the tests: the server on 127.0.0.1:5432 (trust auth, user postgres)
when there is one, otherwise a throwaway cluster started from the installed server binaries
(``TURNKEEPER_TEST_POSTGRES=cluster`` forces that). Each test gets a database of its own,
dropped after it."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"
"""The machine's own server, as CI and the developers' machines run it."""

FORCE = "TURNKEEPER_TEST_POSTGRES"
"""``cluster``: never use the local server, start a throwaway one (to test that path)."""

START_TIMEOUT = 60
"""Seconds for initdb and the server's start: a cold disk on a busy CI machine is slow."""


def binaries() -> Path:
    """Where ``initdb`` and ``pg_ctl`` are: on PATH, else Debian's versioned directory (the
    ``postgresql`` package does not put them on PATH)."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(os.path.realpath(found)).parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if not versions:
        raise RuntimeError(
            "no PostgreSQL server binaries (initdb): scripts/test installs Debian's postgresql"
        )
    return Path(versions[-1]).parent


def reachable(dsn: str) -> bool:
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


class Cluster:
    """A throwaway cluster the test controls: stopped and started again at will (a server
    restart, an outage), on the same port and data."""

    def __init__(self, root: Path, port: int, run_as: list[str]) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self.run_as = run_as
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def ctl(self, *args: str, options: str = "") -> None:
        subprocess.run(
            [
                *self.run_as,
                binaries() / "pg_ctl",
                "-D",
                self.data,
                "-l",
                self.root / "server.log",
                "-w",
                "-t",
                str(START_TIMEOUT),
                "-o",
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 {options}",
                *args,
            ],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT + 10,
        )

    def start(self, options: str = "") -> None:
        self.ctl("start", options=options)

    def stop(self, mode: str = "fast") -> None:
        self.ctl("stop", "-m", mode)


@contextmanager
def controlled_cluster() -> Iterator[Cluster]:
    """A new cluster in a temporary directory on a free port, trust auth for user postgres,
    started; stopped and removed after. The server refuses to run as root: then it runs as
    the ``postgres`` user (which Debian's package makes)."""
    from daemon import free_port

    bin_dir = binaries()
    root = Path(tempfile.mkdtemp(prefix="tk-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    os.chmod(root, 0o700)
    cluster = Cluster(root, free_port(), run_as)
    try:
        subprocess.run(
            [
                *run_as,
                bin_dir / "initdb",
                "-D",
                cluster.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT,
        )
        cluster.start()
        try:
            yield cluster
        finally:
            subprocess.run(
                [*run_as, bin_dir / "pg_ctl", "-D", cluster.data, "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=START_TIMEOUT,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def throwaway_cluster() -> Iterator[str]:
    """A new cluster (``controlled_cluster``); yields its maintenance database's URI."""
    with controlled_cluster() as cluster:
        yield cluster.dsn


@contextmanager
def server() -> Iterator[str]:
    """The URI of a server's maintenance database: the local one, or a throwaway cluster."""
    if os.environ.get(FORCE) != "cluster" and reachable(LOCAL):
        yield LOCAL
        return
    with throwaway_cluster() as dsn:
        yield dsn


@contextmanager
def database(server_dsn: str) -> Iterator[str]:
    """A new, empty database on the server, dropped (with its sessions) after."""
    name = f"tk_test_{secrets.token_hex(6)}"
    with psycopg.connect(server_dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    try:
        yield server_dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def sql(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on its own session; its rows, if it returns any."""
    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def lease(dsn: str, combat_id: str) -> tuple[Any, ...]:
    """A combat's ``(owner, owner_epoch, last_seq)`` as the database has it."""
    [row] = sql(
        dsn,
        "SELECT owner, owner_epoch, last_seq FROM turnkeeper.combats WHERE combat_id = %s",
        combat_id,
    )
    return row


def logged_seqs(dsn: str, combat_id: str) -> list[int]:
    """The seqs of a combat's log in the PostgreSQL store, in order."""
    from turnkeeper.stores.postgresql import SCHEMA

    rows = sql(dsn, f"SELECT seq FROM {SCHEMA}.events WHERE combat_id = %s ORDER BY seq", combat_id)
    return [seq for (seq,) in rows]
