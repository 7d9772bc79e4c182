"""Tables: which group of players a combat belongs to, and how a combat's id says so.

Every combat belongs to one table. The ``default`` table is the one every daemon has: combats
and tokens from before tables existed are its, and a daemon that never makes another behaves
as it always did. Any other table has an id the daemon draws at random (``new_table_id``),
never one a client chooses: a chosen id that was taken would tell its chooser that another
table exists. A combat of such a table is named ``TABLE/NAME`` (``t3f9a2c1d5e/goblins``), so
that combat ids of different tables never collide either: a ``create_combat`` refused with
``combat_exists`` only ever names a combat of the caller's own table.

The membership of each combat is also stored, explicitly, beside the combat in the store
(``combats.table_id``): it is what start-up reads, and what any other store must keep.
"""

from __future__ import annotations

import re
import secrets

DEFAULT_TABLE = "default"
"""The table every daemon has, and where combats and tokens older than tables live."""

TABLE_ID = re.compile(r"t[0-9a-f]{10}")
"""A table id the daemon drew: ``t`` and 40 random bits in hex."""

_PREFIX = re.compile(r"(t[0-9a-f]{10})/")

MAX_TABLES = 10_000
"""Tables one daemon keeps (the default one aside): each is a line of the token file, which
is read whole at each start and rewritten at each change."""

MAX_TABLE_NAME = 100
"""Longest name of a table, in characters: a label for people (a guild's, a campaign's)."""


def new_table_id(taken: set[str] | frozenset[str]) -> str:
    """A fresh table id, none of ``taken``."""
    while True:
        table = "t" + secrets.token_hex(5)
        if table not in taken:
            return table


def table_of(combat_id: str) -> str:
    """The table a combat of this id is created in: the one its ``TABLE/`` prefix names, else
    the default table. (A combat stored before tables keeps the table stored with it, the
    default one, whatever its id looks like.)"""
    found = _PREFIX.match(combat_id)
    return found.group(1) if found is not None else DEFAULT_TABLE


Scope = frozenset[str] | None
"""The tables a session may see and touch: None for every table (the operator)."""
