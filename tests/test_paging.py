"""Paging the daemon's combats: ``list_combats`` and ``subscribe_all`` answer a page at a time
(ids in code-point order, ``after`` + ``limit``), a request that cannot be answered in one
page is refused and changes nothing, and the SDK reads every page. Real daemons, real sockets:
token sessions over TCP and over the WebSocket endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon import CallError, Client, Daemon, create_many, running
from turnkeeper.combats.registry import MAX_COMBAT_PAGE
from turnkeeper_sdk import wire
from turnkeeper_sdk.aio import AsyncClient

MANY = MAX_COMBAT_PAGE + 7
"""More combats than one page holds."""


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    """A daemon holding more combats than a page (ids deliberately not created in order),
    and an observer token."""
    with running(tmp_path_factory.mktemp("paging"), True, ws=True) as d:
        ids = [f"c{(i * 7919) % MANY:04d}" for i in range(MANY)]
        create_many(d.client(), ids)
        yield d, d.token("observer")


def connect(d: Daemon, token: str, transport: str) -> Client:
    if transport == "ws":
        assert d.ws_port is not None
        c = Client.ws(d.ws_port)
    else:
        assert d.tcp_port is not None
        c = Client.tcp(d.tcp_port)
    c.hello(token)
    return c


ALL_IDS = sorted(f"c{i:04d}" for i in range(MANY))


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_list_combats_pages_by_id_with_after_and_limit(
    crowded: tuple[Daemon, str], transport: str
) -> None:
    d, token = crowded
    c = connect(d, token, transport)
    try:
        seen: list[str] = []
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 200}
            if after is not None:
                params["after"] = after
            page = c.call("list_combats", **params)
            seen += [row["combat"] for row in page]
            assert all(row["phase"] == "setup" and row["seq"] == 2 for row in page)
            if len(page) < 200:
                break
            after = page[-1]["combat"]
        assert seen == ALL_IDS
        # A cursor need not be an id that exists: the page starts after where it would sort.
        page = c.call("list_combats", after="c0100x", limit=2)
        assert [row["combat"] for row in page] == ["c0101", "c0102"]
        assert c.call("list_combats", after="c9999", limit=5) == []
    finally:
        c.close()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": MAX_COMBAT_PAGE + 1}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"after": 3, "limit": 10}, "after"),
        ({"after": "", "limit": 10}, "after"),
    ],
)
def test_list_combats_refuses_a_bad_page(
    crowded: tuple[Daemon, str], params: dict[str, Any], field: str
) -> None:
    d, token = crowded
    c = connect(d, token, "tcp")
    try:
        with pytest.raises(CallError) as refused:
            c.call("list_combats", **params)
        assert (refused.value.code, refused.value.field) == ("invalid_params", field)
    finally:
        c.close()


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_more_combats_than_a_page_are_refused_whole_and_change_nothing(
    crowded: tuple[Daemon, str], transport: str
) -> None:
    d, token = crowded
    c = connect(d, token, transport)
    try:
        for method in ("list_combats", "subscribe_all"):
            with pytest.raises(CallError) as refused:
                c.call(method)
            assert (refused.value.code, refused.value.field) == ("result_too_large", "limit")
            assert str(MAX_COMBAT_PAGE) in refused.value.message
        # The refused subscribe_all subscribed nothing: a command's events do not come.
        gm = d.client()
        gm.call(
            "add_combatant",
            combat="c0003",
            request_id=f"quiet-{transport}",
            id=f"quiet-{transport}",
            display_name="X",
        )
        c.call("get_combat", combat="c0003")  # anything queued before this answer is kept
        assert c.notes == []
        # ... and it may be asked again, a page at a time.
        answer = c.call("subscribe_all", limit=MAX_COMBAT_PAGE)
        assert sorted(answer["seqs"]) == ALL_IDS[:MAX_COMBAT_PAGE]
        assert (answer["until"], answer["more"]) == (ALL_IDS[MAX_COMBAT_PAGE - 1], True)
        gm.call(
            "add_combatant",
            combat="c0003",
            request_id=f"loud-{transport}",
            id=f"loud-{transport}",
            display_name="Y",
        )
        c.call("get_combat", combat="c0003")
        assert [n.params["event"] for n in c.notes] == ["command_recorded", "combatant_added"]
    finally:
        c.close()


def test_the_sync_client_reads_every_page(crowded: tuple[Daemon, str]) -> None:
    d, token = crowded
    c = connect(d, token, "tcp")
    try:
        assert [row["combat"] for row in c.list_combats()] == ALL_IDS
    finally:
        c.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_sdk_reads_every_page(crowded: tuple[Daemon, str]) -> None:
    d, token = crowded
    assert d.tcp_port is not None
    with anyio.fail_after(60):
        async with AsyncClient.tcp("127.0.0.1", d.tcp_port, token=token) as client:
            rows = await client.list_combats()
            assert [row["combat"] for row in rows] == ALL_IDS
            page = await client.list_combats(after="c0010", limit=3)
            assert [row["combat"] for row in page] == ["c0011", "c0012", "c0013"]
            async with client.subscribe_all() as everything:
                assert sorted(everything.result["seqs"]) == ALL_IDS
                gm = d.client()
                last = ALL_IDS[-1]
                done = gm.call(
                    "add_combatant", combat=last, request_id="sdk-add", id="z", display_name="Z"
                )
                async for event in everything:
                    if event["combat"] == last and event["seq"] == done["seq"]:
                        break


def test_a_daemon_with_few_combats_still_answers_every_one_without_paging(
    tmp_path: Path,
) -> None:
    with running(tmp_path) as d:
        gm = Client.unix(d.socket)
        limits = gm.hello()["limits"]
        assert limits["max_combat_page"] == MAX_COMBAT_PAGE
        assert limits["max_request_values"] == wire.MAX_REQUEST_VALUES
        create_many(gm, ["b", "a"])
        assert [row["combat"] for row in gm.call("list_combats")] == ["a", "b"]
        assert gm.call("subscribe_all") == {"seqs": {"a": 2, "b": 2}, "until": "b", "more": False}
