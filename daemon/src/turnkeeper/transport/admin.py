"""Tables at the session's edge: what a session of some tables may name, and the methods that
make tables and manage their tokens (the operator's, and a hosting bridge's for the tables it
manages).

A session's tables (``Session.scope``) are settled at hello, so that a request's check is a
lookup in memory: the combat's table (``Combat.table``) in a frozen set. A combat of another
table is answered exactly as a combat that does not exist, in the same order of checks, and
so is a table the caller does not manage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from turnkeeper_engine import commands as cmd
from turnkeeper_engine.plain import Plain

from ..auth import ROLES, AuthError, Principal, TokenFileError, TokenRecord
from ..combats import RequestError
from ..combats.registry import unknown_combat
from ..methods import text
from ..store import StoreError
from ..tables import MAX_TABLE_NAME, table_of

if TYPE_CHECKING:
    from .session import Session

_T = TypeVar("_T")


def unknown_table(table: str, field: str = "table") -> RequestError:
    """The refusal of a table the caller does not manage: that of a missing table."""
    return RequestError("unknown_table", "no table {table!r}", field, table=table)


def hidden(session: Session, combat_id: str, command: cmd.Command) -> bool:
    """Whether a command names a combat outside the session's tables (then ``refuse_hidden``
    answers it); a new combat must be named in one of them, or is refused here. Not a
    coroutine: the usual answer, False, costs a lookup and no await."""
    scope = session.scope
    if type(command) is cmd.CreateCombat:  # not ``isinstance``: see ``methods.command``
        table = table_of(combat_id)
        if scope is None:
            if table not in session.sessions.tokens.load().table_ids():
                raise unknown_table(table, "combat_id")
        elif table not in scope:
            raise RequestError(
                "outside_table",
                "not a combat id of this session's tables: a combat of table T is named T/NAME,"
                " and one of the default table does not start like that",
                "combat_id",
            )
        return False
    # While the daemon stops, ``begin_command`` refuses every command first, this one too. A
    # session of every table (``scope`` None) sees every combat: no look-up, no call.
    return (
        scope is not None
        and not session.sessions.draining
        and not session.hub.visible(combat_id, scope)
    )


async def look_for_table(session: Session, combat_id: str) -> None:
    """Before a ``create_combat``: a table the daemon does not know yet for the session (made
    through another daemon on the same database a moment ago) is looked for where the tokens
    are kept, and the session's tables follow, so ``hidden`` judges the table as it is. Only
    for the operator and hosting bridges: no other session's tables can grow."""
    principal = session.principal
    assert principal is not None
    scope = session.scope
    table = table_of(combat_id)
    tokens = session.sessions.tokens
    if scope is None:
        if table in tokens.load().table_ids():
            return
    elif table in scope or not principal.host:
        return
    try:
        await tokens.refresh(table)
    except StoreError as e:
        # As a table method's look-up is (``_managed``): nothing was done, and the tokens,
        # not the combats, could not be read.
        raise RequestError(
            "tokens_unavailable", "the tokens cannot be read now: retry later", "combat_id"
        ) from e
    if scope is not None:
        session.rescope(tokens.scope(principal))


async def refuse_hidden(session: Session, combat_id: str, request_id: str) -> None:
    """Answer a command of another table's combat as one of a combat that does not exist.
    The writer looks a request id up before it looks for the combat: a remembered one is
    answered from memory (or refused as reused) whatever its combat, so it goes on there."""
    assert session.principal is not None
    if await session.hub.store.lookup_request(session.principal.key, request_id) is None:
        raise unknown_combat(combat_id)


# The methods -------------------------------------------------------------------------------------


def _manager(session: Session) -> Principal:
    """The caller, if it may manage tables: the operator or a hosting bridge."""
    principal = session.principal
    assert principal is not None
    if principal.table is not None and not principal.host:
        raise RequestError(
            "forbidden", "only the operator and hosting bridges manage tables", "method"
        )
    return principal


async def _managed(session: Session, params: Mapping[str, Any]) -> str:
    """The ``table`` param, if the caller manages that table. One it does not is looked for
    again where the tokens are kept before it is refused: made through another daemon on the
    same database, it may not have reached this one's copy yet."""
    principal = _manager(session)
    table = text(params, "table")
    assert table is not None
    tokens = session.sessions.tokens
    if table not in tokens.managed(principal):
        try:
            await tokens.refresh(table)
        except StoreError as e:
            # As a change that cannot reach the database is refused (``_changed``): the
            # table methods have one code for it.
            raise RequestError(
                "tokens_unavailable", "the tokens cannot be read now: retry later", "method"
            ) from e
        if table not in tokens.managed(principal):
            raise unknown_table(table)
    return table


async def _changed(change: Callable[[], _T]) -> _T:
    """Run a change of the tokens in a worker thread (a file is read and written whole, and
    waits for its lock; a database is a transaction away): the event loop serves the other
    sessions meanwhile."""
    try:
        return await anyio.to_thread.run_sync(change)
    except TokenFileError as e:
        # The file is malformed on disk (the daemon runs on its last good copy): the
        # operator's log says what is wrong; nothing is changed.
        raise RequestError(
            "tokens_unavailable", "the token file cannot be changed now; try later", "method"
        ) from e
    except StoreError as e:
        # The database keeping them could not be reached (the log says why): the change
        # rolled back whole.
        raise RequestError(
            "tokens_unavailable", "the tokens' database cannot be changed now; try later", "method"
        ) from e


def _table_row(table: str, name: str, created: float | None) -> Plain:
    return {"table": table, "name": name, "created": created}


def _token_row(r: TokenRecord) -> dict[str, Plain]:
    return {
        "id": r.id,
        "table": r.table,
        "role": r.role,
        "user": r.user,
        "narrator": r.narrator,
        "host": r.host,
        "created": r.created,
    }


async def _create_table(session: Session, params: Mapping[str, Any]) -> Plain:
    principal = _manager(session)
    name = params.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_TABLE_NAME:
        raise RequestError(
            "invalid_params", "a string of 1 to {limit} characters", "name", limit=MAX_TABLE_NAME
        )
    tokens = session.sessions.tokens
    manager = None if principal.table is None else principal.key.removeprefix("token:")
    try:
        record = await _changed(lambda: tokens.add_table(name, manager))
    except AuthError as e:
        if e.code != "invalid_value":
            raise
        raise RequestError.relay(e, "invalid_params", e.field) from e
    # Its maker reaches it at once, and its subscribe_all (if any) follows it.
    session.rescope(tokens.scope(principal))
    return _table_row(record.id, record.name, record.created)


async def _list_tables(session: Session, params: Mapping[str, Any]) -> Plain:
    principal = _manager(session)
    tokens = session.sessions.tokens
    managed = set(tokens.managed(principal))
    rows: list[Plain] = []
    if principal.table is None:
        rows.append(_table_row("default", "default", None))
    rows.extend(
        _table_row(t.id, t.name, t.created) for t in tokens.load().tables if t.id in managed
    )
    return rows


async def _add_token(session: Session, params: Mapping[str, Any]) -> Plain:
    table = await _managed(session, params)
    role = params.get("role")
    if role not in ROLES:
        raise RequestError("invalid_params", "one of {roles}", "role", roles=", ".join(ROLES))
    user = text(params, "user", required=False)
    narrator = params.get("narrator", False)
    if not isinstance(narrator, bool):
        raise RequestError("invalid_params", "a boolean", "narrator")
    tokens = session.sessions.tokens
    try:
        record, secret = await _changed(
            lambda: tokens.add(role, user, narrator=narrator, table=table)
        )
    except AuthError as e:
        if e.code != "invalid_value":
            raise
        raise RequestError.relay(e, "invalid_params", e.field) from e
    return {**_token_row(record), "secret": secret}


async def _list_tokens(session: Session, params: Mapping[str, Any]) -> Plain:
    table = await _managed(session, params)
    return [_token_row(r) for r in session.sessions.tokens.load().tokens if r.table == table]


async def _revoke_token(session: Session, params: Mapping[str, Any]) -> Plain:
    table = await _managed(session, params)
    token_id = text(params, "id")
    assert token_id is not None
    tokens = session.sessions.tokens
    # A hosting bridge's token is made with the CLI: only the operator takes it back (with it
    # go its grants of other tables, which the caller may not manage).
    operator = session.principal is None or session.principal.table is None
    if not operator and any(
        r.host and r.id == token_id and r.table == table for r in tokens.load().tokens
    ):
        raise RequestError("forbidden", "only the operator revokes a hosting bridge's token", "id")
    if not await _changed(lambda: tokens.revoke(token_id, table)):
        raise RequestError("unknown_token", "no token {id!r} in this table", "id", id=token_id)
    return {"id": token_id, "table": table}


HANDLERS: Mapping[str, Callable[[Session, Mapping[str, Any]], Awaitable[Plain]]] = {
    "create_table": _create_table,
    "list_tables": _list_tables,
    "add_token": _add_token,
    "list_tokens": _list_tokens,
    "revoke_token": _revoke_token,
}
"""The table methods (kind ``table`` in the method table), by name."""
