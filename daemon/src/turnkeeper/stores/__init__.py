"""The stores behind the daemon: the port they all satisfy (``turnkeeper.stores.port``), the
embedded SQLite store (``turnkeeper.store``, the default) and the PostgreSQL store
(``turnkeeper.stores.postgresql``, with the ``postgresql`` extra), chosen by ``open_store``."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from ..auth import TokenBook, Tokens
from ..store import Store, StoreError, claim_data_dir
from .port import StorePort

POSTGRESQL_SCHEMES = ("postgresql://", "postgres://")
"""How a ``--store`` location names a PostgreSQL database: libpq's own URI schemes."""

PAGES_PER_MIB = 256
"""SQLite's default page is 4 KiB."""


def is_postgresql(location: str | None) -> bool:
    """Whether ``--store`` names a PostgreSQL database (else the data directory's SQLite)."""
    return location is not None and location.startswith(POSTGRESQL_SCHEMES)


def open_store(
    location: str | None,
    data_dir: Path,
    *,
    max_mib: int | None = None,
    lease_seconds: float | None = None,
    address: str | None = None,
) -> StorePort:
    """The store ``turnkeeper serve`` runs on: PostgreSQL at ``location`` when it is a
    ``postgresql://`` URI (migrated to this daemon's schema first), else SQLite in ``data_dir``.
    ``max_mib`` is the operator's quota, as each store defines it; ``lease_seconds`` (None: the
    default) and ``address`` (where clients reach this daemon) are PostgreSQL's alone."""
    if location is not None and is_postgresql(location):
        load_postgresql()  # says how to install the driver if it is missing
        from .postgresql import LEASE_SECONDS, PostgresStore

        # The data directory still holds the daemon's own files (its socket's lock, the
        # table view's key): checked and locked as for SQLite, so that no other user may
        # change them and no two daemons share them.
        lock = claim_data_dir(data_dir)
        try:
            store: StorePort = PostgresStore.open(
                location,
                max_bytes=None if max_mib is None else max_mib << 20,
                dir_lock=lock,
                lease_seconds=LEASE_SECONDS if lease_seconds is None else lease_seconds,
                address=address,
            )
        except BaseException:
            os.close(lock)
            raise
        return store
    return Store.open(data_dir, max_pages=None if max_mib is None else max_mib * PAGES_PER_MIB)


def open_tokens(location: str | None, data_dir: Path) -> TokenBook:
    """Where the tables and tokens are kept: in the PostgreSQL database at ``location``,
    shared by every daemon on it, when it is a ``postgresql://`` URI; else the data
    directory's token file. Not read yet (``TokenBook.read``)."""
    if location is not None and is_postgresql(location):
        load_postgresql()
        from .tokens import SharedTokens

        return SharedTokens(location)
    return Tokens(data_dir)


def load_postgresql() -> ModuleType:
    """``turnkeeper.stores.postgresql``, or ``StoreError`` saying how to install its driver."""
    try:
        from . import postgresql as module
    except ImportError as e:
        raise StoreError(
            "store_failed",
            "the PostgreSQL store needs {package}: pip install 'turnkeeper[postgresql]'",
            package=e.name or "psycopg",
        ) from e
    return module


__all__ = [
    "POSTGRESQL_SCHEMES",
    "StorePort",
    "is_postgresql",
    "load_postgresql",
    "open_store",
    "open_tokens",
]
