"""Engines and transactions.

SQLite (embedded default): one writer connection whose transactions start with
``BEGIN IMMEDIATE`` (writes queue in-process on the pool, never on ``database is locked``),
plus a small pool of readers that run concurrently under WAL. PostgreSQL: one pool;
writes rely on row locks and guarded ``UPDATE … WHERE`` statements.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.persistence import sqlite_driver
from app.settings import Settings

AUTOCOMMIT_OPTION = "taskhub_autocommit"


def _sqlite_engine(url: str, settings: Settings, *, writer: bool) -> AsyncEngine:
    engine = create_async_engine(
        make_url(url).set(drivername=sqlite_driver.DRIVER_NAME),
        pool_size=1 if writer else max(2, settings.db_pool_size // 2),
        max_overflow=0,
        pool_timeout=60,
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

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        # The driver runs in autocommit mode; this opens the transaction, unless the
        # connection was checked out for single self-guarded statements.
        if not connection.get_execution_options().get(AUTOCOMMIT_OPTION):
            connection.exec_driver_sql(begin_sql)

    return engine


class Database:
    """Hands out short transactions; nothing holds a connection across an ``await`` on
    anything but the database itself."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.url = settings.database_url
        self.dialect = make_url(self.url).get_backend_name()
        if self.dialect == "sqlite":
            self._writer = _sqlite_engine(self.url, settings, writer=True)
            self._reader = _sqlite_engine(self.url, settings, writer=False)
        elif self.dialect == "postgresql":
            engine = create_async_engine(
                self.url,
                pool_size=settings.db_pool_size,
                max_overflow=settings.db_pool_size,
                pool_pre_ping=False,
            )
            self._writer = self._reader = engine
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
        """A transaction that may write; commits on success, rolls back on error."""
        async with self._writer.begin() as conn:
            yield conn

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """A writer connection without a surrounding transaction: each statement commits on
        its own. For work whose every write is one self-guarded statement (no BEGIN/COMMIT
        round trips)."""
        async with self._writer.connect() as conn:
            if self.is_sqlite:
                await conn.execution_options(**{AUTOCOMMIT_OPTION: True})
            else:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        async with self._reader.connect() as conn:
            yield conn

    async def dispose(self) -> None:
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()
