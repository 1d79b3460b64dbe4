"""The private internals of libraries the store builds on, as the pinned versions have
them. An upgrade that changes them fails here, loudly, before anything else misbehaves:
re-test the store against the new version, then widen the pin in pyproject.toml."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from importlib.metadata import version

import aiosqlite
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
)
from sqlalchemy.ext.asyncio import create_async_engine

from taskhub.store.sqlite_driver import (
    DRIVER_NAME,  # noqa: F401  (registers the driver)
    OneHopConnection,
    OneHopCursor,
    OneHopDBAPI,
    OneHopSQLiteDialect,
)
from tests.support.private_internals import Internal, check, check_no_shadowing

# The ranges pyproject.toml pins, for the internals below.
PINNED = {"aiosqlite": ">=0.22.1,<0.23", "sqlalchemy": ">=2.0.30,<2.1"}
SQLITE_DRIVER = "app/store/sqlite_driver.py"
INTERNALS = [
    Internal(
        aiosqlite.Connection,
        "_execute",
        "(self, fn, *args, **kwargs)",
        "aiosqlite",
        f"{SQLITE_DRIVER} runs each statement (and each commit group) as one function on "
        "the connection's thread through it",
    ),
    Internal(
        AsyncAdapt_aiosqlite_connection,
        "_handle_exception",
        "(self, error)",
        "sqlalchemy",
        "OneHopCursor.execute hands a failed statement's error to it (SQLAlchemy's mapping "
        "of sqlite3 errors)",
    ),
    *(
        Internal(
            AsyncAdapt_aiosqlite_cursor,
            slot,
            None,
            "sqlalchemy",
            f"OneHopCursor (a subclass with no slots of its own) reads or fills it: {use}",
        )
        for slot, use in (
            ("_connection", "the aiosqlite connection"),
            ("_adapt_connection", "the adapted connection (grouped or not)"),
            ("_rows", "the statement's rows"),
            ("await_", "waits for the statement from SQLAlchemy's greenlet"),
        )
    ),
]


def test_the_installed_versions_are_within_the_tested_pins() -> None:
    for name, pin in PINNED.items():
        installed = Version(version(name))
        assert installed in SpecifierSet(pin), (
            f"{name} {installed} is outside {pin}, the range whose internals the store uses"
        )


@pytest.mark.parametrize("internal", INTERNALS, ids=Internal.label)
def test_a_private_method_relied_on_is_there_as_it_was(internal: Internal) -> None:
    check(internal)


@pytest.mark.parametrize(
    ("subclass", "intended"),
    [
        (OneHopConnection, set()),
        (OneHopCursor, set()),
        (OneHopDBAPI, set()),
        (OneHopSQLiteDialect, set()),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_no_private_name_of_the_driver_replaces_one_of_sqlalchemy_unawares(
    subclass: type, intended: set[str]
) -> None:
    check_no_shadowing(subclass, intended)


async def test_a_function_put_on_aiosqlites_queue_runs_on_its_thread_in_order() -> None:
    """``OneHopConnection.terminate`` puts a rollback on aiosqlite's private queue
    (``Connection._tx``) as ``(None, function)``: no future, run on the connection's thread
    after what was queued before it."""
    connection = await aiosqlite.connect(":memory:")
    try:
        ran: list[tuple[str, bool]] = []
        await connection.execute("CREATE TABLE t (x)")
        await connection.execute("BEGIN")
        await connection.execute("INSERT INTO t VALUES (1)")

        def roll_back() -> None:
            ran.append(("rollback", threading.current_thread() is connection._thread))
            connection._conn.execute("ROLLBACK")

        connection._tx.put_nowait((None, roll_back))
        rows = await (await connection.execute("SELECT count(*) FROM t")).fetchall()
        assert ran == [("rollback", True)]
        assert rows == [(0,)]
        assert not connection.in_transaction
    finally:
        await asyncio.wait_for(connection.close(), 10)


async def test_aiosqlite_runs_a_function_on_its_thread_with_the_sqlite3_connection() -> None:
    """``sqlite_driver`` sends one function per statement through the private
    ``Connection._execute`` and hands it ``Connection._conn`` (and reads ``_connection``)."""
    connection = await aiosqlite.connect(":memory:")
    try:
        assert isinstance(connection._conn, sqlite3.Connection)
        assert connection._connection is connection._conn
        answer = await connection._execute(
            lambda: connection._conn.execute("SELECT 41 + 1").fetchone()
        )
        assert answer == (42,)
    finally:
        await connection.close()


async def test_sqlalchemys_aiosqlite_adapter_holds_the_aiosqlite_connection() -> None:
    """``sqlite_driver`` subclasses SQLAlchemy's aiosqlite adapter and reaches the
    aiosqlite connection as its ``_connection``."""
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    try:
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            adapted = raw.dbapi_connection
            assert isinstance(adapted, AsyncAdapt_aiosqlite_connection)
            assert isinstance(adapted._connection, aiosqlite.Connection)
    finally:
        await engine.dispose()


def test_compiled_statements_expose_positiontup_and_result_columns() -> None:
    """``hot_statements`` turns named parameters into positional ones through
    ``Compiled.positiontup`` and types result rows through ``Compiled._result_columns``
    (name first, type fourth)."""
    table = Table("t", MetaData(), Column("id", Integer), Column("name", String))
    statement = select(table.c.id, table.c.name).where(table.c.id == bindparam("wanted"))
    for module in (sqlite, postgresql):
        dialect = module.dialect(paramstyle="qmark" if module is sqlite else "numeric_dollar")
        compiled = statement.compile(dialect=dialect)
        assert list(compiled.positiontup or []) == ["wanted"]
        columns = compiled._result_columns
        assert [column[0] for column in columns] == ["id", "name"]
        assert isinstance(columns[0][3], Integer)
        assert isinstance(columns[1][3], String)
