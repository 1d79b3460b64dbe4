"""A cluster-wide lease: one process of the cluster does some work alone (the sweeper)."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

if TYPE_CHECKING:
    from taskhub.store.database import Database


_local_leases: set[tuple[str, str]] = set()  # (database, name) held by a ClusterLease

# Behind a transaction-mode pooler: take the lease row if it is free, expired or already
# ours, in one statement (the row lock orders concurrent takers); by the database's clock,
# so that the replicas' clocks need not agree.
_TAKE_ROW = text(
    """
    INSERT INTO cluster_lease (name, holder, expires_at)
    VALUES (:name, :holder, now() + make_interval(secs => :seconds))
    ON CONFLICT (name) DO UPDATE
        SET holder = excluded.holder, expires_at = excluded.expires_at
        WHERE cluster_lease.holder = excluded.holder OR cluster_lease.expires_at < now()
    RETURNING holder
    """
)
_DROP_ROW = text("DELETE FROM cluster_lease WHERE name = :name AND holder = :holder")
DEFAULT_ROW_SECONDS = 60.0


def _lock_key(name: str) -> int:
    """The advisory lock key of ``name`` (64 bits of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class ClusterLease:
    """A cluster-wide lock, kept from ``hold`` to ``release``: across many cycles by a
    process that should do some work alone for as long as it runs (a leader), or for one
    cycle of it.

    PostgreSQL: a session advisory lock on a connection of its own, outside the pool and
    kept open; PostgreSQL frees the lock when that connection or its process dies, and
    another process takes it at its next ``hold``. Behind a transaction-mode pooler
    (``TASKHUB_DATABASE_POOLER=transaction``) no session outlives a transaction, so the
    lease is a ``cluster_lease`` row instead: each ``hold`` renews it for ``row_seconds``
    (database clock); a holder that dies leaves it to be taken once that has run out.
    SQLite: one process per database file, so an in-process lock is the whole cluster."""

    def __init__(
        self, db: Database, name: str, *, row_seconds: float = DEFAULT_ROW_SECONDS
    ) -> None:
        """``row_seconds``: how long a row lease lasts past each ``hold`` (longer than the
        time between two of the holder's ``hold`` calls, cycle included)."""
        self._db = db
        self._name = name
        self._conn: AsyncConnection | None = None
        self._engine: AsyncEngine | None = None
        self._held_locally = False  # on SQLite
        self._row_seconds = row_seconds
        self._holder = uuid.uuid4().hex  # this lease object, as a row's holder
        self._row_taken = False

    @property
    def _as_row(self) -> bool:
        return self._db.settings.database_pooler == "transaction"

    async def hold(self) -> bool:
        """Whether this process holds the lease now: it keeps it, or tries to take it."""
        if self._db.dialect != "postgresql":
            return self._hold_locally()
        if self._as_row:
            return await self._hold_row()
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

    async def _hold_row(self) -> bool:
        """Take or renew the lease row (one autocommit statement: no session state)."""
        params = {"name": self._name, "holder": self._holder, "seconds": self._row_seconds}
        async with self._db.autocommit() as conn:
            taken = (await conn.execute(_TAKE_ROW, params)).first() is not None
        self._row_taken = taken
        return taken

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
        if self._row_taken:
            self._row_taken = False
            # (the database away: the row runs out by itself)
            with contextlib.suppress(Exception):
                async with self._db.autocommit() as conn:
                    await conn.execute(_DROP_ROW, {"name": self._name, "holder": self._holder})
        await self._drop()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()  # closing the session frees its advisory locks
