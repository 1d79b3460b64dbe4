"""The private internals of libraries the store builds on, as the pinned versions have
them. An upgrade that changes them fails here, loudly, before anything else misbehaves:
re-test the store against the new version, then widen the pin in pyproject.toml."""

from __future__ import annotations

import sqlite3
from importlib.metadata import version

import aiosqlite
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_connection
from sqlalchemy.ext.asyncio import create_async_engine

from taskhub.store.sqlite_driver import DRIVER_NAME  # noqa: F401  (registers the driver)

# The ranges pyproject.toml pins, for the internals below.
PINNED = {"aiosqlite": ">=0.22.1,<0.23", "sqlalchemy": ">=2.0.30,<2.1"}


def test_the_installed_versions_are_within_the_tested_pins() -> None:
    for name, pin in PINNED.items():
        installed = Version(version(name))
        assert installed in SpecifierSet(pin), (
            f"{name} {installed} is outside {pin}, the range whose internals the store uses"
        )


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
