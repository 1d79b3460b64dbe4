"""Engines and transactions.

SQLite (embedded default): one writer SQLite connection, plus a small pool of readers that
run concurrently under WAL. A transaction (``write``) has the writer to itself and starts
with ``BEGIN IMMEDIATE`` (writes queue in-process, never on ``database is locked``).
Autocommit work (``autocommit``: single self-guarded statements, the hot path) shares it:
the statements of concurrent requests are committed in groups, one ``fsync`` per group
(``app/store/sqlite_driver.py``). PostgreSQL: one pool; writes rely on row locks and
guarded ``UPDATE … WHERE`` statements. ``autocommit`` and ``read`` hand out connections on
which hot statements skip SQLAlchemy's execution machinery (``prepared.py``).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal, Protocol

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from taskhub.json_codec import dump_json, load_json
from taskhub.rules.running_limits import LIMIT_RACE_SQLSTATE
from taskhub.store import sqlite_driver
from taskhub.store.deployment import is_embedded
from taskhub.store.hot_statements import AsyncpgHotConnection, HotConnection, SQLiteHotConnection

AUTOCOMMIT_OPTION = "taskhub_autocommit"
# Handles on the one SQLite writer connection: cheap, and as many as requests in flight so
# that concurrent single statements reach the same commit group instead of queueing.
SQLITE_WRITER_HANDLES = 64


class DatabaseSettings(Protocol):
    """What the store reads of the hub's settings (``taskhub.settings.Settings`` has all of
    it): named here so that the store does not import the settings module."""

    @property
    def database_url(self) -> str: ...
    @property
    def database_pooler(self) -> str: ...  # "none" or "transaction"
    @property
    def db_pool_size(self) -> int: ...
    @property
    def db_pool_timeout_seconds(self) -> float: ...
    @property
    def db_statement_timeout_seconds(self) -> float: ...
    @property
    def sqlite_synchronous(self) -> str: ...
    @property
    def sqlite_busy_timeout_ms(self) -> int: ...
    @property
    def sqlite_cache_size_mb(self) -> int: ...
    @property
    def sqlite_mmap_size_mb(self) -> int: ...


def _load_sqlite_json(stored: str | float) -> Any:
    """A JSON column's value as SQLite returns it: a column declared ``JSON`` has numeric
    affinity, so a document that is a bare number (a result of ``1``) comes back as that
    number, not as its text."""
    return stored if isinstance(stored, int | float) else load_json(stored)


def _sqlite_engine(url: str, settings: DatabaseSettings, *, writer: bool) -> AsyncEngine:
    engine = create_async_engine(
        make_url(url).set(drivername=sqlite_driver.DRIVER_NAME),
        pool_size=SQLITE_WRITER_HANDLES if writer else max(2, settings.db_pool_size // 2),
        max_overflow=0,
        pool_timeout=settings.db_pool_timeout_seconds,
        # The writer's pool "connections" are handles on one SQLite connection.
        connect_args={"taskhub_share": "writer"} if writer else {},
        json_serializer=dump_json,
        json_deserializer=_load_sqlite_json,
    )
    begin_sql = "BEGIN IMMEDIATE" if writer else "BEGIN"

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from the sqlite3 module (SQLAlchemy's recipe).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={settings.sqlite_synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={settings.sqlite_busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # Deep queues are counted on indexes of several MB: keep them in memory, and map
        # the file so every reader shares the OS page cache instead of copying pages.
        cursor.execute(f"PRAGMA cache_size=-{settings.sqlite_cache_size_mb * 1024}")
        cursor.execute(f"PRAGMA mmap_size={settings.sqlite_mmap_size_mb * 1024 * 1024}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # Every checkout starts ungrouped (``Database.autocommit`` groups its own); a
        # grouped handle stays so until then, so that the pool's reset on its return
        # leaves the shared connection alone (another group's transaction may be open).
        dbapi_connection.grouped = False

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        # The driver runs in autocommit mode; this opens the transaction, unless the
        # connection was checked out for single self-guarded statements.
        if not connection.get_execution_options().get(AUTOCOMMIT_OPTION):
            connection.exec_driver_sql(begin_sql)

    return engine


class DatabaseUnavailable(Exception):
    """The database could not serve a request in time: no pooled connection became free
    within ``TASKHUB_DB_POOL_TIMEOUT_SECONDS``, a statement got no answer within
    ``TASKHUB_DB_STATEMENT_TIMEOUT_SECONDS``, or the connection was lost or could not be
    opened. The statement that met it did not commit, or (the connection went after it
    was sent) its outcome is unknown; an earlier step of the same request may have
    committed. ``Database``'s connections raise it in place of the driver's or the pool's
    error (its ``__cause__``); the transport answers it with a 503 ``database-unavailable``
    (a client repeats the request, with its key if it has one)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# The driver's errors that say the server is gone or going (a connection exception, or
# the server shutting down, crashed or still starting), rather than that a statement failed;
# and the one asyncpg raises for a statement sent on a connection it is still tearing down
# after the server ended it ("cannot switch to state …; another operation is in progress").
_SERVER_GONE = (
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    # "sorry, too many clients already": every connection slot taken (by other clients);
    # the next connection may get one.
    asyncpg.exceptions.TooManyConnectionsError,
)


def _unavailable(exc: BaseException, settings: DatabaseSettings) -> DatabaseUnavailable | None:
    """``exc`` as a ``DatabaseUnavailable`` if it is one of the failures it stands for."""
    if isinstance(exc, DatabaseUnavailable):
        return None  # already said (a connection used inside another)
    if isinstance(exc, PoolTimeout):
        seconds = settings.db_pool_timeout_seconds
        return DatabaseUnavailable(f"No database connection became free within {seconds:g} s.")
    if isinstance(exc, TimeoutError):  # asyncpg's command (or connect) timeout
        if is_embedded(settings.database_url):
            return DatabaseUnavailable("The database did not answer in time.")
        seconds = settings.db_statement_timeout_seconds
        return DatabaseUnavailable(f"The database did not answer within {seconds:g} s.")
    driver_error = exc.orig if isinstance(exc, DBAPIError) else exc
    # (SQLAlchemy's asyncpg adapter raises its own error from the driver's.)
    cause = getattr(driver_error, "__cause__", None)
    if (
        (isinstance(exc, DBAPIError) and exc.connection_invalidated)
        or isinstance(driver_error, (*_SERVER_GONE, OSError))
        or isinstance(cause, _SERVER_GONE)
    ):
        return DatabaseUnavailable("The database connection was lost or could not be opened.")
    return None


class _RaisedAsUnavailable:
    """A context in which what says the database is unavailable (``_unavailable``) is
    raised as ``DatabaseUnavailable`` (from the original); everything else as it is."""

    __slots__ = ("settings",)

    def __init__(self, settings: DatabaseSettings) -> None:
        self.settings = settings

    def __enter__(self) -> None:
        return None

    def __exit__(self, _kind: Any, exc: BaseException | None, _trace: Any) -> Literal[False]:
        if isinstance(exc, Exception):
            unavailable = _unavailable(exc, self.settings)
            if unavailable is not None:
                raise unavailable from exc
        return False


def _postgres_engine(url: str, settings: DatabaseSettings, pre_ping: bool) -> AsyncEngine:
    engine = create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        # No overflow: a connection opened past the pool's size would be closed again on
        # return, and reconnecting (and re-preparing statements) under load costs more
        # than waiting for a pooled connection.
        max_overflow=0,
        pool_timeout=settings.db_pool_timeout_seconds,
        pool_pre_ping=pre_ping,
        # asyncpg's default timeout of every statement (the hot ones in ``prepared.py``
        # too: they pass none of their own) and of opening a connection. Past it the
        # statement raises ``TimeoutError`` and asyncpg asks the server (on a connection
        # of its own) to cancel it; whoever uses the connection next (the rollback, the
        # hot path's invalidation) waits for that at most as long again, after which
        # asyncpg closes the connection. Without it a statement on a connection gone
        # half-open (a partition, a NAT that forgot it) waited for ever.
        # JIT off: PostgreSQL compiles a statement it prices above ``jit_above_cost`` first,
        # which takes hundreds of ms; the hub's statements are short, and one that reads a
        # deep queue (a page's positions among 100,000 delayed tasks) would pay it on every
        # run.
        connect_args=postgres_connect_args(settings),
        json_serializer=dump_json,
        json_deserializer=load_json,
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        set_keepalive(dbapi_connection.driver_connection)

    return engine


def postgres_connect_args(settings: DatabaseSettings) -> dict[str, Any]:
    """asyncpg's connection arguments (through SQLAlchemy's adapter) for the hub's pools.

    Behind a transaction-mode pooler (``TASKHUB_DATABASE_POOLER=transaction``) each
    transaction may run on another server connection, so nothing may outlive one: both
    statement caches are off, which makes asyncpg prepare every statement unnamed, with no
    Sync between its preparation and its execution (so PgBouncer keeps both on one server
    connection; a named one would be missing, or already exist, on the next); and no
    startup setting is sent (PgBouncer refuses unknown ones): set ``jit = off`` on the
    database instead (docs/operations.md)."""
    args: dict[str, Any] = {
        "command_timeout": settings.db_statement_timeout_seconds,
        "timeout": settings.db_statement_timeout_seconds,
    }
    if settings.database_pooler == "transaction":
        args["statement_cache_size"] = 0  # asyncpg's own cache (the hot statements')
        args["prepared_statement_cache_size"] = 0  # SQLAlchemy's adapter's
    else:
        args["server_settings"] = {"jit": "off"}
    return args


# TCP keepalive on PostgreSQL connections: an idle pooled connection whose peer is gone
# (a partition, a NAT that dropped it) is closed by the kernel after about a minute instead
# of the system default of over two hours, so that it is not handed out again as if alive.
KEEPALIVE_IDLE_SECONDS = 30
KEEPALIVE_INTERVAL_SECONDS = 10
KEEPALIVE_PROBES = 3


def set_keepalive(connection: asyncpg.Connection) -> None:
    """Turn on TCP keepalive on an asyncpg connection's socket (asyncpg has no option for
    it; its transport is reached through the connection's private ``_transport``, so a
    future asyncpg without it leaves keepalive off rather than failing)."""
    transport = getattr(connection, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a Unix socket: nothing between the hub and the server to go half-open
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        option = getattr(socket, name, None)
        if option is not None:  # Linux; other systems keep their own timings
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the database connection was lost or could not be made, so that
    the same statement may succeed on a fresh one (not that the statement was wrong)."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated) or isinstance(
            exc, (OperationalError, InterfaceError)
        )
    return isinstance(
        exc,
        (
            OSError,
            asyncpg.exceptions.InterfaceError,
            asyncpg.exceptions.ConnectionDoesNotExistError,
            asyncpg.PostgresConnectionError,
        ),
    )


def is_deadlock(exc: BaseException) -> bool:
    """Whether PostgreSQL aborted the transaction as one side of a deadlock: it changed
    nothing, and the same work may succeed when run again."""
    return _sqlstate(exc) == DEADLOCK_DETECTED


def raced_a_running_limit(exc: BaseException) -> bool:
    """Whether PostgreSQL refused a claim that raced another past a job's running limit
    (``rules.running_limits``): it changed nothing, and made again it counts afresh."""
    return _sqlstate(exc) == LIMIT_RACE_SQLSTATE


def _sqlstate(exc: BaseException) -> str | None:
    error = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(error, "sqlstate", None)


DEADLOCK_DETECTED = "40P01"  # PostgreSQL's SQLSTATE (asyncpg's and SQLAlchemy's errors carry it)


class SharedOrExclusive:
    """A gate with two kinds of holders: any number of shared ones at a time, or one
    exclusive one. A waiting exclusive holder goes before shared ones that come later; the
    shared ones that waited for an exclusive holder go before the next exclusive one (an
    exclusive holder coming straight back, e.g. a purge in batches, cannot starve them)."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0
        self._shared_waiting = 0
        self._shared_turn = False  # the waiting shared holders go next

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        # The hot path (no exclusive holder or waiter) takes no lock: the event loop runs
        # one coroutine at a time, so the counters cannot change under this check.
        if self._exclusive or self._exclusive_waiting:
            async with self._changed:
                self._shared_waiting += 1
                try:
                    await self._changed.wait_for(
                        lambda: (
                            not self._exclusive
                            and (self._shared_turn or not self._exclusive_waiting)
                        )
                    )
                    self._shared += 1
                finally:
                    self._shared_waiting -= 1
                    if not self._shared_waiting and self._shared_turn:
                        self._shared_turn = False  # every waiter is in (or gave up)
                        self._changed.notify_all()
        else:
            self._shared += 1
        try:
            yield
        finally:
            self._shared -= 1
            if not self._shared and self._exclusive_waiting:
                async with self._changed:
                    self._changed.notify_all()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._changed:
            self._exclusive_waiting += 1
            try:
                await self._changed.wait_for(
                    lambda: not self._exclusive and not self._shared and not self._shared_turn
                )
            finally:
                self._exclusive_waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            async with self._changed:
                self._exclusive = False
                if self._shared_waiting:
                    self._shared_turn = True
                self._changed.notify_all()


def _driver_connection(conn: AsyncConnection) -> Any:
    """The DBAPI adapter under a started connection (no I/O: it is already checked out)."""
    return conn.sync_connection.connection.dbapi_connection  # type: ignore[union-attr]


def _hot(conn: AsyncConnection) -> HotConnection:
    if conn.dialect.name == "sqlite":
        return SQLiteHotConnection(_driver_connection(conn), conn.dialect, sa=conn)
    return AsyncpgHotConnection(_driver_connection(conn), conn.dialect, sa=conn, pooled=conn)


@asynccontextmanager
async def _in_autocommit_mode(conn: AsyncConnection) -> AsyncIterator[AsyncConnection]:
    await conn.execution_options(isolation_level="AUTOCOMMIT")
    yield conn


class Database:
    """Hands out short transactions; nothing holds a connection across an ``await`` on
    anything but the database itself."""

    def __init__(self, settings: DatabaseSettings, *, pre_ping: bool = False) -> None:
        """``pre_ping``: test a pooled PostgreSQL connection before each use (a process with
        rare, important writes, like the taskiq worker, rather than a busy server)."""
        self.settings = settings
        self._unavailable = _RaisedAsUnavailable(settings)
        self.url = settings.database_url
        self.dialect = make_url(self.url).get_backend_name()
        self._writer_gate: SharedOrExclusive | None = None
        # SQLite: a handle on the writer kept for hot statements (see ``autocommit``).
        self._hot_writer: AsyncConnection | None = None
        self._hot_writer_lock = asyncio.Lock()
        # PostgreSQL: idle connections kept checked out for ``autocommit`` (see there).
        self._kept: list[AsyncConnection] = []
        # Half the pool at most: with a pool of one, none (reads would find no connection).
        self._kept_limit = settings.db_pool_size // 2
        if self.dialect == "sqlite":
            self._writer_gate = SharedOrExclusive()
            self._writer = _sqlite_engine(self.url, settings, writer=True)
            self._reader = _sqlite_engine(self.url, settings, writer=False)
        elif self.dialect == "postgresql":
            self._writer = self._reader = _postgres_engine(self.url, settings, pre_ping)
        else:
            raise ValueError(f"unsupported database {self.dialect!r}: use sqlite or postgresql")

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def engine(self) -> AsyncEngine:
        """The engine that may write (for migrations and DDL)."""
        return self._writer

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that may write; commits on success, rolls back on error. Here and
        in ``autocommit`` and ``read``, what says the database is unavailable (a pool or
        statement timeout, a connection lost) is raised as ``DatabaseUnavailable``."""
        with self._unavailable:
            if self._writer_gate is None:
                async with self._writer.begin() as conn:
                    yield conn
                return
            async with self._writer_gate.exclusive(), self._writer.begin() as conn:
                yield conn

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[HotConnection]:
        """A writer connection without a surrounding transaction: each statement commits on
        its own (on SQLite, in a group with other requests' statements). For work whose
        every write is one self-guarded statement (no BEGIN/COMMIT round trips).

        Hot statements run straight on the driver (``prepared.py``); a SQLAlchemy
        connection is set up only for the first statement that is not hot. On SQLite the
        hot ones need no pool checkout at all: they go through a handle on the writer kept
        open for them. On PostgreSQL, up to half the pool stays checked out between uses
        (a checkout and return through SQLAlchemy's pool costs more CPU than the statement
        it serves); the other half stays free for ``read`` and ``write``."""
        with self._unavailable:
            if self._writer_gate is None:  # PostgreSQL
                conn = self._kept.pop() if self._kept else await self._writer.connect()
                hot: HotConnection = AsyncpgHotConnection(
                    _driver_connection(conn),
                    conn.dialect,
                    open_sa=functools.partial(_in_autocommit_mode, conn),
                    pooled=conn,
                )
                clean = False
                try:
                    yield hot
                    clean = True
                finally:
                    await hot.close()
                    await self._keep_or_return(conn, clean)
                return
            async with self._writer_gate.shared():
                writer = await self._hot_writer_handle()
                hot = SQLiteHotConnection(writer, self._writer.dialect, open_sa=self._grouped)
                try:
                    yield hot
                finally:
                    await hot.close()

    async def _keep_or_return(self, conn: AsyncConnection, clean: bool) -> None:
        """Keep a PostgreSQL autocommit connection for the next use if its work ended
        normally and left nothing open (no SQLAlchemy-level transaction, not invalidated);
        otherwise hand it back to the pool, which resets or discards it."""
        reusable = clean and not conn.invalidated and not conn.in_transaction()
        if reusable and len(self._kept) < self._kept_limit:
            self._kept.append(conn)
        else:
            await conn.close()

    async def _hot_writer_handle(self) -> Any:
        """The writer handle of SQLite's hot statements (grouped: they join commit groups)."""
        if self._hot_writer is None:
            async with self._hot_writer_lock:
                if self._hot_writer is None:
                    conn = await self._writer.connect()
                    _driver_connection(conn).grouped = True
                    self._hot_writer = conn
        return _driver_connection(self._hot_writer)

    @asynccontextmanager
    async def _grouped(self) -> AsyncIterator[AsyncConnection]:
        """A SQLAlchemy connection on SQLite's writer whose statements join commit groups."""
        async with self._writer.connect() as conn:
            await conn.execution_options(**{AUTOCOMMIT_OPTION: True})
            _driver_connection(conn).grouped = True  # until its next checkout (``_on_checkout``)
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[HotConnection]:
        """A connection for reads (hot statements run straight on the driver). On
        PostgreSQL each hot statement is its own snapshot."""
        with self._unavailable:
            async with self._reader.connect() as conn:
                yield _hot(conn)

    async def ping(self) -> None:
        """One round trip to the database (readiness)."""
        async with self.read() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        kept, self._kept = self._kept, []
        for conn in kept:
            await conn.close()
        if self._hot_writer is not None:
            hot_writer, self._hot_writer = self._hot_writer, None
            await hot_writer.close()
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()
