"""The store under a real daemon: a real SQLite file edited while the daemon is down, then a
restart. Nothing acknowledged disappears silently: an unreadable or missing event quarantines its
combat, an unreadable snapshot costs only a replay of the log."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from daemon import CallError, Client, Daemon, running


def _combat(c: Client, combat: str = "bank") -> Any:
    """A started combat: seq 9, the result of its last command returned."""
    c.call("create_combat", request_id=f"{combat}-1", combat_id=combat, ruleset="marvel")
    c.call(
        "add_combatant",
        request_id=f"{combat}-2",
        combat=combat,
        id="spidey",
        display_name="Spider-Man",
    )
    return c.call("start_combat", request_id=f"{combat}-start", combat=combat)


@contextmanager
def _db(d: Daemon) -> Iterator[sqlite3.Connection]:
    """The daemon's database, opened by hand while the daemon is down; committed on exit."""
    with closing(sqlite3.connect(d.data_dir / "turnkeeper.db")) as db, db:
        yield db


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
            db.execute(
                "UPDATE events SET body = x'92' WHERE combat_id = 'bank' AND seq = ?", (last,)
            )
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
            stored = db.execute("SELECT max(seq) FROM events WHERE combat_id = 'bank'").fetchone()
        assert stored == (last,)
        assert "combat_quarantined" in d.log.read_text()


def test_a_deleted_last_event_quarantines_its_combat(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        _combat(d.client())
        last = d.client().call("get_combat", combat="bank")["seq"]
        d.kill()
        with _db(d) as db:
            db.execute("DELETE FROM events WHERE combat_id = 'bank' AND seq = ?", (last,))
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
                db.execute("UPDATE events SET body = x'c1' WHERE combat_id = 'bank' AND seq = 2")
            else:
                db.execute("DELETE FROM events WHERE combat_id = 'bank' AND seq = 2")
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
        assert "snapshot_unreadable" in d.log.read_text()
        turn = before["view"]["turn"]
        ref = {"round": turn["round"], "combatant": turn["combatant"]}
        c.call("end_turn", request_id="next", combat="bank", turn=ref)
        after = c.call("get_combat", combat="bank")
        d.kill()
        d.start()
        assert d.client().call("get_combat", combat="bank") == after
