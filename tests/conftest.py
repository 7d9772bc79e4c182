"""Fixtures shared by the test modules: a real PostgreSQL (``tests/postgres.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import postgres


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
