"""A cluster-wide lease: one process of the cluster does some work alone (the sweeper)."""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from taskhub.store.database import Database


_local_leases: set[tuple[str, str]] = set()  # (database, name) held by a ClusterLease


def _lock_key(name: str) -> int:
    """The advisory lock key of ``name`` (64 bits of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class ClusterLease:
    """A cluster-wide lock, kept from ``hold`` to ``release``: across many cycles by a
    process that should do some work alone for as long as it runs (a leader), or for one
    cycle of it.

    PostgreSQL: a session advisory lock on a connection of its own, outside the pool and
    kept open; PostgreSQL frees the lock when that connection or its process dies, and
    another process takes it at its next ``hold``. SQLite: one process per database file,
    so an in-process lock is the whole cluster."""

    def __init__(self, db: Database, name: str) -> None:
        self._db = db
        self._name = name
        self._conn: AsyncConnection | None = None
        self._engine: AsyncEngine | None = None
        self._held_locally = False  # on SQLite

    async def hold(self) -> bool:
        """Whether this process holds the lease now: it keeps it, or tries to take it."""
        if self._db.dialect != "postgresql":
            return self._hold_locally()
        if self._conn is not None:
            try:  # still connected, so still holding it
                await self._conn.scalar(text("SELECT 1"))
                await self._conn.commit()
                return True
            except Exception:
                await self._drop()
        if self._engine is None:
            self._engine = create_async_engine(self._db.url, poolclass=NullPool)
        conn = await self._engine.connect()
        try:
            key = _lock_key(self._name)
            taken = bool(await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}))
            await conn.commit()
        except BaseException:
            await conn.close()
            raise
        if not taken:
            await conn.close()
            return False
        self._conn = conn
        return True

    def _hold_locally(self) -> bool:
        key = (self._db.url, self._name)
        if not self._held_locally:
            if key in _local_leases:
                return False
            _local_leases.add(key)
            self._held_locally = True
        return True

    async def release(self) -> None:
        """Give the lease up (another process may take it at its next try)."""
        if self._held_locally:
            _local_leases.discard((self._db.url, self._name))
            self._held_locally = False
        await self._drop()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()  # closing the session frees its advisory locks
