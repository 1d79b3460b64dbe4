"""SQLite through aiosqlite with one thread hop per statement, and group commit.

SQLAlchemy's aiosqlite adapter makes four round trips to aiosqlite's thread per statement
(cursor, execute, fetchall, close). Each hop costs a queue hand-off and an event-loop
wake-up, which dominated the cost of a request. This adapter runs the four steps as one
function on that thread. It subclasses SQLAlchemy's adapter classes (2.0 series) and uses
aiosqlite's ``Connection._execute``; the whole test suite runs through it.

Group commit: connections made with ``taskhub_share=<key>`` all stand on one SQLite
connection (the hub's writer). Statements sent through them in *grouped* mode — single
self-guarded statements, each its own transaction as far as its caller can tell — are
queued; whatever has queued while the previous group ran goes to the thread as the next
group: ``BEGIN IMMEDIATE``, each statement inside its own savepoint (a failing one is
undone alone and reports its error), ``COMMIT``. One commit, one ``fsync``, one thread hop
for the lot; every caller gets its answer only after the commit, so nothing is
acknowledged before it is durable, and if the commit fails every statement of the group
reports that failure. A lone statement runs as a plain autocommit statement.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from typing import Any, cast

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


Outcome = tuple[Any, list[Any], int, int]


def _run_group(conn: sqlite3.Connection, statements: list[tuple[str, Any]]) -> list[Any]:
    """Run ``statements`` in one transaction, each in a savepoint: per statement, its
    outcome or the exception it raised; all the commit's exception if the commit failed."""
    if len(statements) == 1:
        operation, parameters = statements[0]
        try:
            return [_run(conn, operation, parameters)]
        except Exception as error:
            return [error]
    outcomes: list[Any] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for operation, parameters in statements:
            conn.execute("SAVEPOINT grouped_statement")
            try:
                outcomes.append(_run(conn, operation, parameters))
            except Exception as error:
                conn.execute("ROLLBACK TO grouped_statement")
                outcomes.append(error)
            conn.execute("RELEASE grouped_statement")
        conn.execute("COMMIT")
    except Exception as error:  # the transaction itself failed: nothing of it stays
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return [error] * len(statements)
    return outcomes


class CommitGroup:
    """Queues grouped statements for one SQLite connection and runs them in groups."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection  # aiosqlite.Connection
        self._queue: list[tuple[str, Any, asyncio.Future[Outcome]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.groups = 0
        self.statements = 0

    async def run(self, operation: str, parameters: Any) -> Outcome:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queue.append((operation, parameters, future))
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        group: list[tuple[str, Any, asyncio.Future[Outcome]]] = []
        try:
            while self._queue:
                # A caller that gave up (cancelled) before its turn: its statement is not run.
                group = [item for item in self._queue if not item[2].done()]
                self._queue = []
                if not group:
                    continue
                statements = [(operation, parameters) for operation, parameters, _ in group]
                try:
                    outcomes = await self._connection._execute(
                        functools.partial(_run_group, self._connection._conn, statements)
                    )
                except Exception as error:  # the connection's thread is gone
                    outcomes = [error] * len(group)
                self.groups += 1
                self.statements += len(group)
                for (_, _, future), outcome in zip(group, outcomes, strict=True):
                    if future.done():
                        continue
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        except BaseException as stopped:  # cancelled (loop shutting down): no caller waits forever
            for _, _, future in group + self._queue:
                if not future.done():
                    future.set_exception(ConnectionError(f"commit group stopped: {stopped!r}"))
            raise
        finally:
            self._drainer = None


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    __slots__ = ()

    _adapt_connection: OneHopConnection  # made only by ``OneHopConnection.cursor``

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        aio = self._connection
        adapted = self._adapt_connection
        try:
            if adapted.grouped:  # only ever set on the shared writer
                outcome = cast(_Share, adapted.share).group.run(operation, parameters)
            else:
                outcome = aio._execute(lambda: _run(aio._conn, operation, parameters))
            description, rows, lastrowid, rowcount = self.await_(outcome)
        except Exception as error:
            self._adapt_connection._handle_exception(error)
        self.description = description
        self._rows.clear()
        self._rows.extend(rows)
        self.lastrowid = lastrowid
        self.rowcount = rowcount


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    """With ``share``, one of several pool connections over one aiosqlite connection (the
    last of them to close closes it). ``grouped``: statements go through the share's
    commit group (set only while no transaction is open on the shared connection)."""

    def __init__(self, dbapi: Any, connection: Any, share: _Share | None = None) -> None:
        super().__init__(dbapi, connection)
        self.share = share
        self.grouped = False

    async def run_direct(self, operation: str, parameters: Any) -> tuple[list[Any], list[str]]:
        """Run one statement from the event loop, past SQLAlchemy (``prepared.py``): its
        rows and column names. Grouped like the cursor's statements when ``grouped``."""
        if self.grouped:
            outcome = await self.share.group.run(operation, parameters)  # type: ignore[union-attr]
        else:
            aio = self._connection
            outcome = await aio._execute(functools.partial(_run, aio._conn, operation, parameters))
        description, rows = outcome[0], outcome[1]
        return rows, [column[0] for column in description] if description else []

    def close(self) -> None:
        share, self.share = self.share, None
        if share is None or share.release():
            super().close()

    def terminate(self) -> None:
        """How SQLAlchemy ends a connection whose statement was cancelled (a request or a
        timer cancelled mid-write). A handle on the shared writer must not close it under
        the others: it rolls back what it left open, queued on the connection's thread
        behind the statement still running there and ahead of anything sent later, and
        lets go of its share."""
        if self.share is None:
            super().terminate()
            return
        self._connection._tx.put_nowait((None, functools.partial(_roll_back, self._connection)))
        self.close()

    def cursor(self, server_side: bool = False) -> AsyncAdapt_aiosqlite_cursor:
        return super().cursor(server_side) if server_side else OneHopCursor(self)

    def _in_transaction(self) -> bool:
        # Read between statements, while aiosqlite's thread is idle for this connection.
        return bool(self._connection._conn.in_transaction)

    def commit(self) -> None:
        # Autocommit and grouped statements leave nothing to commit.
        if not self.grouped and self._in_transaction():
            super().commit()

    def rollback(self) -> None:
        if not self.grouped and self._in_transaction():
            super().rollback()


def _roll_back(aio: Any) -> None:
    """On the connection's thread: end a transaction a cancelled handle left open."""
    if aio._connection is not None and aio._connection.in_transaction:
        aio._connection.execute("ROLLBACK")


class _Share:
    """An aiosqlite connection, its commit group, and how many pool connections stand on
    it."""

    def __init__(self, key: str, connection: Any, registry: dict[str, _Share]) -> None:
        self.key, self.connection, self._registry = key, connection, registry
        self.group = CommitGroup(connection)
        self.users = 0

    def acquire(self) -> _Share:
        self.users += 1
        return self

    def release(self) -> bool:
        """One user fewer; True when it was the last (the caller closes the connection)."""
        self.users -= 1
        if self.users > 0:
            return False
        self._registry.pop(self.key, None)
        return True


class OneHopDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def __init__(self, aiosqlite: Any, sqlite: Any) -> None:
        super().__init__(aiosqlite, sqlite)
        self.shares: dict[str, _Share] = {}

    def connect(self, *args: Any, **kwargs: Any) -> OneHopConnection:
        """``taskhub_share=<key>``: every connection made with the same key stands on one
        aiosqlite connection (one thread, one SQLite connection)."""
        key = kwargs.pop("taskhub_share", None)
        share = self.shares.get(key) if key is not None else None
        if share is not None:
            return OneHopConnection(self, share.connection, share.acquire())
        adapted = super().connect(*args, **kwargs)
        if key is None:
            return OneHopConnection(self, adapted._connection)
        share = self.shares[key] = _Share(key, adapted._connection, self.shares)
        return OneHopConnection(self, adapted._connection, share.acquire())


class OneHopSQLiteDialect(SQLiteDialect_aiosqlite):
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> OneHopDBAPI:
        return OneHopDBAPI(__import__("aiosqlite"), __import__("sqlite3"))


registry.register("sqlite.taskhub", __name__, "OneHopSQLiteDialect")
