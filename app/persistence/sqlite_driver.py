"""SQLite through aiosqlite with one thread hop per statement.

SQLAlchemy's aiosqlite adapter makes four round trips to aiosqlite's thread per statement
(cursor, execute, fetchall, close). Each hop costs a queue hand-off and an event-loop
wake-up, which dominated the cost of a request. This adapter runs the four steps as one
function on that thread. It subclasses SQLAlchemy's adapter classes (2.0 series) and uses
aiosqlite's ``Connection._execute``; the whole test suite runs through it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
    SQLiteDialect_aiosqlite,
)

DRIVER_NAME = "sqlite+taskhub"


def _run(
    conn: sqlite3.Connection, operation: str, parameters: Any
) -> tuple[Any, list[Any], int, int]:
    cursor = conn.cursor()
    try:
        if parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        if cursor.description:
            return cursor.description, cursor.fetchall(), -1, -1
        return None, [], cursor.lastrowid or -1, cursor.rowcount
    finally:
        cursor.close()


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        aio = self._connection
        try:
            description, rows, lastrowid, rowcount = self.await_(
                aio._execute(lambda: _run(aio._conn, operation, parameters))
            )
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        self.description = description
        self._rows.clear()
        self._rows.extend(rows)
        self.lastrowid = lastrowid
        self.rowcount = rowcount


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    def cursor(self, server_side: bool = False) -> AsyncAdapt_aiosqlite_cursor:
        return super().cursor(server_side) if server_side else OneHopCursor(self)

    def _in_transaction(self) -> bool:
        # Read between statements, while aiosqlite's thread is idle for this connection.
        return bool(self._connection._conn.in_transaction)

    def commit(self) -> None:
        if self._in_transaction():  # autocommit statements leave nothing to commit
            super().commit()

    def rollback(self) -> None:
        if self._in_transaction():
            super().rollback()


class OneHopDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *args: Any, **kwargs: Any) -> OneHopConnection:
        adapted = super().connect(*args, **kwargs)
        return OneHopConnection(self, adapted._connection)


class OneHopSQLiteDialect(SQLiteDialect_aiosqlite):
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> OneHopDBAPI:  # type: ignore[override]
        return OneHopDBAPI(__import__("aiosqlite"), __import__("sqlite3"))


registry.register("sqlite.taskhub", __name__, "OneHopSQLiteDialect")
