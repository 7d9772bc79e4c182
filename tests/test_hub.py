"""The hub on a real SQLite store, in process: limits that an end-to-end test cannot reach
quickly."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from turnkeeper import host
from turnkeeper.host import Hub, RequestError
from turnkeeper.store import Store
from turnkeeper_engine import NARRATOR
from turnkeeper_engine import commands as c


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_daemon_holds_at_most_max_combats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "MAX_COMBATS", 2)
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        for n in range(2):
            await hub.execute("p", NARRATOR, f"c{n}", c.CreateCombat(f"c{n}", "marvel"), f"r{n}")
        with pytest.raises(RequestError) as refused:
            await hub.execute("p", NARRATOR, "c2", c.CreateCombat("c2", "marvel"), "r2")
        assert (refused.value.code, refused.value.field) == ("too_many_combats", "combat_id")
        assert sorted(hub.combats) == ["c0", "c1"]
        await store.stop()
    store.close()


@pytest.mark.anyio
async def test_a_quarantined_combats_row_shows_its_reason_cut_short(tmp_path: Path) -> None:
    """A page of combats has a bounded size: a quarantine reason (an exception's text, of any
    length) is cut to MAX_REASON_CHARS in its row; the daemon's log has it whole."""
    store = Store.open(tmp_path)
    hub = Hub(store)
    async with anyio.create_task_group() as tg:
        await tg.start(store.run)
        await hub.execute("p", NARRATOR, "bad", c.CreateCombat("bad", "marvel"), "r")
        hub.combats["bad"].quarantined = "x" * (host.MAX_REASON_CHARS * 10)
        assert hub.summaries() == [{"combat": "bad", "quarantined": "x" * host.MAX_REASON_CHARS}]
        await store.stop()
    store.close()
