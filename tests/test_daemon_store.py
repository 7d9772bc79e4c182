"""The store under a real daemon: a real SQLite file edited while the daemon is down, then a
restart. Nothing acknowledged disappears silently: an unreadable or missing event quarantines its
combat, an unreadable snapshot costs only a replay of the log."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from daemon import CALL_TIMEOUT, CallError, Client, Daemon, add_spidey, running
from turnkeeper.private import exclusive_lock, private_directory
from turnkeeper_engine import State
from turnkeeper_engine.plain import from_shared


def _combat(c: Client, combat: str = "bank") -> Any:
    """A started combat: seq 9, the result of its last command returned."""
    add_spidey(c, combat)
    return c.call("start_combat", request_id=f"{combat}-start", combat=combat)


@contextmanager
def _db(d: Daemon) -> Iterator[sqlite3.Connection]:
    """The daemon's database, opened by hand while the daemon is down; committed on exit."""
    with closing(sqlite3.connect(d.data_dir / "turnkeeper.db")) as db, db:
        yield db


EVENT_TABLES = ("events", "recent_events")
"""Where a killed daemon's events are: the latest in ``recent_events`` (see ``store.py``)."""


def _in_events(db: sqlite3.Connection, statement: str, *args: Any) -> None:
    """Run a statement on ``{t}`` each table of events (a row is in one of them)."""
    for table in EVENT_TABLES:
        db.execute(statement.format(t=table), args)


@contextmanager
def running_daemon(d: Daemon) -> Iterator[Daemon]:
    """``running`` for a daemon the test set up itself."""
    d.start()
    try:
        yield d
    finally:
        if d.process is not None and d.process.poll() is None:
            d.process.kill()
            d.process.wait()


def _refused(c: Client, method: str, **params: Any) -> CallError:
    with pytest.raises(CallError) as refused:
        c.call(method, **params)
    return refused.value


def test_an_unreadable_last_event_quarantines_and_is_never_dropped(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        c = d.client()
        _combat(c, "good")
        started = _combat(c)
        last = c.call("get_combat", combat="bank")["seq"]
        d.kill()
        with _db(d) as db:
            _in_events(db, "UPDATE {t} SET body = x'92' WHERE combat_id = 'bank' AND seq = ?", last)
        d.start()
        c = d.client()
        refused = _refused(c, "get_combat", combat="bank")
        assert (refused.code, refused.field) == ("combat_quarantined", "combat")
        assert f"event {last} is unreadable" in refused.message
        assert _refused(c, "history", combat="bank", after=0).code == "combat_quarantined"
        # A new command would have taken the unreadable event's seq: it is refused instead.
        error = _refused(
            c,
            "end_turn",
            request_id="next",
            combat="bank",
            turn={"round": 1, "combatant": "spidey"},
        )
        assert error.code == "combat_quarantined"
        # The retry of the command that wrote it still gets its remembered answer, which stays
        # true: the event is kept for the operator.
        assert c.call("start_combat", request_id="bank-start", combat="bank") == started
        assert c.call("get_combat", combat="good")["seq"] == last
        d.kill()
        with _db(d) as db:
            stored = [
                db.execute(f"SELECT max(seq) FROM {t} WHERE combat_id = 'bank'").fetchone()[0]
                for t in EVENT_TABLES
            ]
        assert max(seq for seq in stored if seq is not None) == last
        assert "combat_quarantined" in d.log.read_text()


def test_a_deleted_last_event_quarantines_its_combat(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        _combat(d.client())
        last = d.client().call("get_combat", combat="bank")["seq"]
        d.kill()
        with _db(d) as db:
            _in_events(db, "DELETE FROM {t} WHERE combat_id = 'bank' AND seq = ?", last)
        d.start()
        refused = _refused(d.client(), "get_combat", combat="bank")
        assert refused.code == "combat_quarantined"
        assert f"seq {last} is missing" in refused.message


@pytest.mark.parametrize("damage", ["unreadable", "deleted"])
def test_a_damaged_event_before_the_snapshot_quarantines(tmp_path: Path, damage: str) -> None:
    with running(tmp_path, False, "--snapshot-every", "2") as d:
        _combat(d.client())
        d.kill()
        with _db(d) as db:
            (snapshot_seq,) = db.execute(
                "SELECT seq FROM snapshots WHERE combat_id = 'bank'"
            ).fetchone()
            assert snapshot_seq > 2
            if damage == "unreadable":
                _in_events(db, "UPDATE {t} SET body = x'c1' WHERE combat_id = 'bank' AND seq = 2")
            else:
                _in_events(db, "DELETE FROM {t} WHERE combat_id = 'bank' AND seq = 2")
        d.start()
        refused = _refused(d.client(), "history", combat="bank", after=0)
        assert refused.code == "combat_quarantined"
        assert "2 is" in refused.message


@pytest.mark.parametrize("body", [b"\xc1", msgpack.packb(1)], ids=["not_msgpack", "not_a_state"])
def test_an_unreadable_snapshot_is_passed_over_and_the_combat_rebuilt_from_its_log(
    tmp_path: Path, body: bytes
) -> None:
    with running(tmp_path, False, "--snapshot-every", "2") as d:
        c = d.client()
        _combat(c, "good")
        _combat(c)
        before = c.call("get_combat", combat="bank")
        d.kill()
        with _db(d) as db:
            db.execute("UPDATE snapshots SET body = ? WHERE combat_id = 'bank'", (body,))
        d.start()
        c = d.client()
        assert c.call("get_combat", combat="bank") == before
        assert c.call("get_combat", combat="good")["seq"] == before["seq"]
        assert _logged(d, "snapshot_unreadable") == 1
        # The replay is paid once: a fresh snapshot of the log's end replaces the bad one.
        assert _logged(d, "snapshot_stored") == 1
        seq, fresh = _fresh_snapshot(d, "bank", body)
        d.kill()
        assert seq == before["seq"]
        assert from_shared(State, msgpack.unpackb(fresh, raw=False)).seq == seq
        d.start()
        c = d.client()
        assert c.call("get_combat", combat="bank") == before
        assert _logged(d, "snapshot_unreadable") == 1
        turn = before["view"]["turn"]
        ref = {"round": turn["round"], "combatant": turn["combatant"]}
        c.call("end_turn", request_id="next", combat="bank", turn=ref)
        after = c.call("get_combat", combat="bank")
        d.kill()
        d.start()
        assert d.client().call("get_combat", combat="bank") == after
        assert _logged(d, "snapshot_unreadable") == 1


def _fresh_snapshot(d: Daemon, combat: str, bad: bytes) -> tuple[int, bytes]:
    """The snapshot that replaced ``bad``, once it is on disk: the SQLite store writes
    snapshots in a transaction aside, after the commands' answers (``store.py``), so the one
    a rebuild hands it lands a moment after ``snapshot_stored`` is logged. Read while the
    daemon runs, as a reader of the WAL."""
    deadline = time.monotonic() + CALL_TIMEOUT
    while True:
        with closing(sqlite3.connect(d.data_dir / "turnkeeper.db")) as db:
            row = db.execute("SELECT seq, body FROM snapshots WHERE combat_id = ?", (combat,))
            seq, body = row.fetchone()
        if body != bad:
            return seq, body
        assert time.monotonic() < deadline, "the fresh snapshot never reached the disk"
        time.sleep(0.02)


def _logged(d: Daemon, event: str) -> int:
    """Lines of the daemon's log, over all its starts, that report ``event``."""
    return sum(f'"{event}"' in line for line in d.log.read_text().splitlines())


def _serve(data_dir: Path, socket: Path) -> subprocess.CompletedProcess[str]:
    """``turnkeeper serve`` expected to refuse at start-up: its exit and what it said."""
    argv = [sys.executable, "-m", "turnkeeper.cli", "serve", "--log-format", "json"]
    argv += ["--data-dir", str(data_dir), "--socket", str(socket)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT)


def test_a_second_daemon_on_the_same_data_directory_refuses_naming_it_and_the_holder(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        _combat(d.client())
        assert d.process is not None
        second = _serve(d.data_dir, tmp_path / "other" / "turnkeeper.sock")
        assert second.returncode != 0
        said = second.stdout + second.stderr
        assert str(d.data_dir) in said
        assert f"pid {d.process.pid}" in said
        assert d.client().call("get_combat", combat="bank")["seq"] == 9
        # The lock goes with the process, even one killed: the next daemon starts.
        d.kill()
        d.start()
        assert d.client().call("get_combat", combat="bank")["seq"] == 9


def test_a_second_serve_on_a_live_socket_refuses_and_leaves_it_to_the_first(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        assert d.process is not None
        second = _serve(tmp_path / "other-data", d.socket)
        assert second.returncode != 0
        said = second.stdout + second.stderr
        assert f"a daemon (pid {d.process.pid}) is already listening on {d.socket}" in said
        assert d.socket.exists()
        assert d.client().call("list_combats") == []
        assert d.stop() == 0
        assert not d.socket.exists()  # the first still removes its own on the way out


def test_a_daemon_still_binding_its_socket_is_not_raced_out_of_it(tmp_path: Path) -> None:
    # Another daemon has taken the socket's lock and not yet bound: the path is empty or holds
    # a dead daemon's socket, which a probe alone would take for free.
    path = tmp_path / "run" / "turnkeeper.sock"
    path.parent.mkdir(mode=0o700)
    lock = exclusive_lock(path.with_name("turnkeeper.sock.lock"))
    try:
        refused = _serve(tmp_path / "data", path)
    finally:
        os.close(lock)
    assert refused.returncode != 0
    assert f"pid {os.getpid()}" in refused.stdout + refused.stderr
    assert not path.exists()


def test_serve_never_removes_a_file_on_the_socket_path_that_is_not_a_socket(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run" / "turnkeeper.sock"
    path.parent.mkdir(mode=0o700)
    path.write_text("not a socket")
    refused = _serve(tmp_path / "data", path)
    assert refused.returncode != 0
    assert "is not a socket" in refused.stdout + refused.stderr
    assert path.read_text() == "not a socket"


def test_the_store_files_are_private_and_so_is_the_data_directory(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        _combat(d.client())
        files = ["turnkeeper.db", "turnkeeper.db-wal", "turnkeeper.db-shm", "turnkeeper.lock"]
        modes = {name: stat.S_IMODE(os.stat(d.data_dir / name).st_mode) for name in files}
        assert modes == dict.fromkeys(files, 0o600)
        assert stat.S_IMODE(os.stat(d.data_dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(d.socket.parent).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(f"{d.socket}.lock").st_mode) == 0o600


def test_readable_directories_holding_only_turnkeepers_files_are_tightened_and_logged(
    tmp_path: Path,
) -> None:
    # As an older daemon left them: made with the umask's mode, the database 0644.
    d = Daemon(tmp_path)
    d.data_dir.mkdir(mode=0o755)
    os.chmod(d.data_dir, 0o755)
    d.socket.parent.mkdir(mode=0o750)
    os.chmod(d.socket.parent, 0o750)
    (d.data_dir / "turnkeeper.db").touch(mode=0o644)
    os.chmod(d.data_dir / "turnkeeper.db", 0o644)
    with running_daemon(d):
        _combat(d.client())
        assert stat.S_IMODE(os.stat(d.data_dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(d.socket.parent).st_mode) == 0o700
        for name in ("turnkeeper.db", "turnkeeper.db-wal", "turnkeeper.db-shm"):
            assert stat.S_IMODE(os.stat(d.data_dir / name).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(d.socket).st_mode) == 0o600
        tightened = [
            line for line in d.log.read_text().splitlines() if "permissions_tightened" in line
        ]
        said = "\n".join(tightened)
        assert f'{d.data_dir}"' in said
        assert "0755" in said
        assert f'{d.socket.parent}"' in said
        assert "0750" in said
        assert "turnkeeper.db" in said  # the daemon's own file, found 0644


@pytest.mark.parametrize("which", ["data", "socket"])
def test_a_readable_directory_holding_other_files_is_refused_and_left_as_it_is(
    tmp_path: Path, which: str
) -> None:
    # Chosen for more than Turnkeeper (``--data-dir .``, ``--socket ~/tk.sock``): not chmodded
    # under the operator.
    data_dir, socket = tmp_path / "data", tmp_path / "run" / "turnkeeper.sock"
    loose = data_dir if which == "data" else socket.parent
    loose.mkdir()
    os.chmod(loose, 0o755)
    (loose / "notes.txt").write_text("mine")
    refused = _serve(data_dir, socket)
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert str(loose) in said
    assert "0755" in said
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o755
    assert os.listdir(loose) == ["notes.txt"]


@pytest.mark.parametrize("which", ["data", "socket"])
def test_a_directory_others_may_write_in_is_refused_and_left_as_it_is(
    tmp_path: Path, which: str
) -> None:
    data_dir, socket = tmp_path / "data", tmp_path / "run" / "turnkeeper.sock"
    loose = data_dir if which == "data" else socket.parent
    loose.mkdir()
    os.chmod(loose, 0o777)
    refused = _serve(data_dir, socket)
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert str(loose) in said
    assert "0777" in said
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o777
    assert os.listdir(loose) == []


def test_a_setgid_directory_only_its_owner_may_read_is_private_as_it_is(tmp_path: Path) -> None:
    # Made inside a setgid project tree with umask 077: the special bits let nobody read it.
    shared = tmp_path / "sg"
    shared.mkdir()
    os.chmod(shared, 0o2700)
    (shared / "notes.txt").write_text("mine")
    private_directory(shared, "data directory", lambda name: name.startswith("turnkeeper."))
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o2700
