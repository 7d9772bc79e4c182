"""Fixtures shared by the test modules: a real PostgreSQL (``tests/postgres.py``). The test
session runs on this checkout's compiled catalogues (the .mo files the daemon reads): compiled
here when missing or older than their .po, as after translating by hand, so a test never reads
a stale translation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import postgres
from turnkeeper import i18n


def pytest_sessionstart() -> None:
    sources = list(i18n.LOCALE_DIR.glob("*/LC_MESSAGES/*.po"))
    if any(
        not po.with_suffix(".mo").exists()
        or po.with_suffix(".mo").stat().st_mtime < po.stat().st_mtime
        for po in sources
    ):
        i18n.compile_all()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URI of a PostgreSQL server's maintenance database, for the whole session."""
    with postgres.server() as dsn:
        yield dsn


@pytest.fixture
def postgres_db(postgres_server: str) -> Iterator[str]:
    """The URI of an empty database of this test's own, dropped after it."""
    with postgres.database(postgres_server) as dsn:
        yield dsn
