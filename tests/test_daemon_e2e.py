"""End to end over a real socket against a real daemon process and its SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon import CallError, Client, add_spidey, running


def test_r5_a_retried_request_id_applies_once_even_across_a_kill(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        c = d.client()
        add_spidey(c)
        first = c.call("start_combat", request_id="start", combat="bank")
        d.kill()
        d.start()
        again = d.client().call("start_combat", request_id="start", combat="bank")
        assert again == first
        view = d.client().call("get_combat", combat="bank")
        assert view["seq"] == first["seq"]
        assert view["view"]["turn"]["combatant"] == "spidey"


def test_subscribe_replays_missed_events_then_goes_live_without_gaps(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        writer, reader = d.client(), d.client()
        add_spidey(writer)
        assert reader.call("subscribe", combat="bank", after=1)["seq"] == 4
        writer.call("start_combat", request_id="start", combat="bank")
        seqs = [reader.notification().params["seq"] for _ in range(8)]
        assert seqs == list(range(2, 10))


def test_sigterm_drains_and_exits_zero_with_the_socket_removed(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        add_spidey(d.client())
        assert d.stop() == 0
        assert not d.socket.exists()
        d.start()
        assert d.client().call("get_combat", combat="bank")["seq"] == 4


def test_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        d.kill()
        assert d.socket.exists()
        d.start()
        assert d.client().call("list_combats") == []


def test_tcp_requires_a_token(tmp_path: Path) -> None:
    with running(tmp_path, tcp=True) as d:
        secret = d.token("narrator")
        from daemon import Client

        assert d.tcp_port is not None
        anonymous = Client.tcp(d.tcp_port)
        with pytest.raises(CallError) as refused:
            anonymous.hello()
        assert (refused.value.code, refused.value.field) == ("unauthenticated", "token")
        c = Client.tcp(d.tcp_port)
        assert c.hello(secret)["session"]["role"] == "narrator"
        add_spidey(c)


def test_start_up_is_the_last_snapshot_plus_the_tail(tmp_path: Path) -> None:
    with running(tmp_path, False, "--snapshot-every", "5") as d:
        c = d.client()
        add_spidey(c)
        c.call("start_combat", request_id="start", combat="bank")
        for n in range(6):
            turn = c.call("get_combat", combat="bank")["view"]["turn"]
            ref = {"round": turn["round"], "combatant": turn["combatant"]}
            c.call("end_turn", request_id=f"end-{n}", combat="bank", turn=ref)
        before = c.call("get_combat", combat="bank")
        d.kill()
        import sqlite3

        db = sqlite3.connect(d.data_dir / "turnkeeper.db")
        (snapshot_seq,) = db.execute(
            "SELECT seq FROM snapshots WHERE combat_id = 'bank'"
        ).fetchone()
        db.close()
        assert 5 <= snapshot_seq <= before["seq"]
        d.start()
        after = d.client().call("get_combat", combat="bank")
        assert after == before
        undone = d.client().call("undo", request_id="undo", combat="bank")
        assert undone["events"][-1]["event"] == "command_undone"


def test_watch_prints_the_live_board(tmp_path: Path) -> None:
    import subprocess
    import sys

    with running(tmp_path) as d:
        c = d.client()
        add_spidey(c)
        c.call("add_combatant", request_id="add", combat="bank", id="ock", display_name="Ock")
        c.call(
            "roll_initiative", request_id="r1", combat="bank", combatant="spidey", faces=[6, 6, 6]
        )
        c.call("roll_initiative", request_id="r2", combat="bank", combatant="ock", faces=[2, 2, 2])
        c.call("start_combat", request_id="start", combat="bank")
        c.call("hold", request_id="hold", combat="bank", turn={"round": 1, "combatant": "spidey"})
        watch = [sys.executable, "-m", "turnkeeper.cli", "watch", "bank", "--once"]
        board = subprocess.run(
            [*watch, "--socket", str(d.socket)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert "bank (Marvel Multiverse RPG) — rounds — round 1" in board
        assert ">    6   Ock" in board
        assert "18   Spider-Man  (holding)" in board
        pt = subprocess.run(
            [*watch, "--socket", str(d.socket), "--locale", "pt-BR"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        assert "bank (Marvel Multiverse RPG) — rodadas — rodada 1" in pt, pt
        assert "18   Spider-Man  (aguardando)" in pt, pt


def test_a_full_store_is_an_error_to_the_client_never_an_acknowledged_loss(
    tmp_path: Path,
) -> None:
    # The quota bounds the database and its write-ahead log together.
    quota = 1 << 20
    files = [tmp_path / "data" / name for name in ("turnkeeper.db", "turnkeeper.db-wal")]
    with running(tmp_path, False, "--max-db-mib", "1") as d:
        c = d.client()
        add_spidey(c)
        code = None
        acknowledged = 0
        largest = 0
        for n in range(5000):
            try:
                c.call(
                    "apply_condition",
                    request_id=f"fill-{n}",
                    combat="bank",
                    target="spidey",
                    type="custom",
                    note="x" * 1500,
                )
                acknowledged += 1
            except CallError as e:
                code = e.code
                break
            largest = max(largest, sum(f.stat().st_size for f in files if f.exists()))
        assert code == "store_full"
        assert acknowledged > 100  # most of the quota held conditions before it was full
        assert largest <= quota
        seq = c.call("get_combat", combat="bank")["seq"]
        d.kill()
        d.start()
        after = d.client().call("get_combat", combat="bank")
        assert after["seq"] == seq  # every acknowledged command is there, the refused one is not
        assert len(after["view"]["conditions"]) == acknowledged


def test_a_corrupt_combat_is_quarantined_and_the_others_still_load(tmp_path: Path) -> None:
    import sqlite3

    with running(tmp_path) as d:
        c = d.client()
        add_spidey(c, "good")
        add_spidey(c, "bad")
        c.call("start_combat", request_id="bad-start", combat="bad")
        d.kill()
        db = sqlite3.connect(d.data_dir / "turnkeeper.db")
        for table in ("events", "recent_events"):  # a killed daemon's latest are in the second
            db.execute(f"UPDATE {table} SET body = x'c1c1' WHERE combat_id = 'bad' AND seq = 2")
        db.commit()
        db.close()
        d.start()
        c = d.client()
        assert c.call("get_combat", combat="good")["seq"] == 4
        with pytest.raises(CallError) as refused:
            c.call("get_combat", combat="bad")
        assert (refused.value.code, refused.value.field) == ("combat_quarantined", "combat")
        listed = {row["combat"]: row for row in c.call("list_combats")}
        assert "quarantined" in listed["bad"]
        assert "combat_quarantined" in d.log.read_text()


def test_subscribe_all_follows_every_combat_new_ones_included(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        writer, reader = d.client(), d.client()
        add_spidey(writer, "first")
        everything = {"seqs": {"first": 4}, "until": "first", "more": False}
        assert reader.call("subscribe_all") == everything
        writer.call("start_combat", request_id="first-start", combat="first")
        add_spidey(writer, "second")
        seen = [
            (n.params["combat"], n.params["seq"]) for n in (reader.notification() for _ in range(9))
        ]
        assert seen[:5] == [("first", s) for s in range(5, 10)]
        assert seen[5:] == [("second", s) for s in range(1, 5)]
        with pytest.raises(CallError) as twice:
            reader.call("subscribe_all")
        assert twice.value.code == "already_subscribed"


def test_no_peer_narrator_makes_even_the_own_uid_show_a_token(tmp_path: Path) -> None:
    from daemon import Client

    with running(tmp_path, False, "--no-peer-narrator", "--debug") as d:
        with pytest.raises(CallError) as refused:
            Client.unix(d.socket).hello()
        assert (refused.value.code, refused.value.field) == ("unauthenticated", "token")
        c = Client.unix(d.socket)
        assert c.hello(d.token("observer"))["session"]["role"] == "observer"
        log = [line for line in d.log.read_text().splitlines() if '"request"' in line]
        assert log
        assert all('"connection": "c' in line for line in log)


def test_after_a_restart_list_combats_answers_from_the_stored_summaries(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        c = d.client()
        add_spidey(c, "one")
        add_spidey(c, "two")
        c.call("start_combat", request_id="two-start", combat="two")
        before = c.call("list_combats")
        d.kill()
        d.start()
        assert d.client().call("list_combats") == before
        assert [row["combat"] for row in before] == ["one", "two"]


def test_requests_sent_together_with_hello_are_all_answered(tmp_path: Path) -> None:
    from turnkeeper_sdk import wire

    with running(tmp_path) as d:
        c = Client.unix(d.socket)
        hello = wire.Request(1, "hello", {"protocol": 1, "client": {"name": "t", "kind": "tool"}})
        burst = [hello] + [
            wire.Request(
                n,
                "create_combat",
                {"request_id": f"r{n}", "combat_id": f"c{n}", "ruleset": "marvel"},
            )
            for n in range(2, 202)
        ]
        c.send_raw(b"".join(wire.pack(m) for m in burst))
        answers = [c.response(n) for n in range(1, 202)]
        assert all(a.error is None for a in answers)
        assert len(d.client().call("list_combats")) == 200


def test_a_bridge_reusing_a_request_id_for_another_user_is_refused(tmp_path: Path) -> None:
    with running(tmp_path) as d:
        gm = d.client()
        add_spidey(gm)
        gm.call(
            "add_combatant",
            request_id="x",
            combat="bank",
            id="x",
            display_name="X",
            controller="u1",
        )
        bridge = Client.unix(d.socket)
        bridge.hello(d.token("bridge"))
        roll = {"combat": "bank", "combatant": "x", "request_id": "same"}
        first = bridge.call("roll_initiative", **roll, **{"as": "u1"})
        assert bridge.call("roll_initiative", **roll, **{"as": "u1"}) == first
        with pytest.raises(CallError) as refused:
            bridge.call("roll_initiative", **roll, **{"as": "u2"})
        assert (refused.value.code, refused.value.field) == ("request_id_reused", "request_id")


def test_reads_answered_on_arrival_keep_their_place_among_other_requests(tmp_path: Path) -> None:
    """A view the daemon holds is answered as soon as its request arrives; one behind a
    command still waits for it, and shows what it did."""
    from turnkeeper_sdk import wire

    with running(tmp_path) as d:
        gm = d.client()
        add_spidey(gm)
        seq = gm.call("get_combat", combat="bank")["seq"]
        add = {"request_id": "x", "combat": "bank", "id": "x", "display_name": "X"}
        burst = [
            wire.Request(11, "get_combat", {"combat": "bank"}),
            wire.Request(12, "add_combatant", add),
            wire.Request(13, "get_combat", {"combat": "bank"}),
            wire.Request(14, "get_combat", {"combat": "nowhere"}),
            wire.Request(15, "get_combat", {}),
        ]
        gm.send_raw(b"".join(wire.pack(m) for m in burst))
        # Each read in turn: a response out of order would be skipped, and its wait time out.
        assert gm.response(11).result["seq"] == seq
        added = gm.response(12).result["seq"]
        third = gm.response(13).result
        assert third["seq"] == added > seq
        assert "x" in [c["id"] for c in third["view"]["combatants"]]
        refusals = [gm.response(n).error for n in (14, 15)]
        assert [(e.code, e.field) for e in refusals if e] == [
            ("unknown_combat", "combat"),
            ("invalid_params", "combat"),
        ]
