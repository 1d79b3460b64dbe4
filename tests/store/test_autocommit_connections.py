"""PostgreSQL's autocommit connections (the hot path) stay checked out between uses, up to
half the pool; the other half stays free for transactions and reads. A connection whose
work failed, or that SQLAlchemy left in a transaction, goes back to the pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.hot_statements import hot

pytestmark = pytest.mark.postgres_only

BACKEND = hot(text("SELECT pg_backend_pid() AS pid"))


@pytest.fixture
async def small_pool(database_url: str) -> AsyncIterator[Database]:
    db = Database(Settings(database_url=database_url, db_pool_size=4))
    yield db
    await db.dispose()


def checked_out(db: Database) -> int:
    return db.engine.pool.checkedout()  # type: ignore[attr-defined]


async def backend_of_next_autocommit(db: Database) -> int:
    async with db.autocommit() as conn:
        return int((await conn.execute(BACKEND)).scalar())


async def test_the_next_autocommit_reuses_the_connection(small_pool: Database) -> None:
    first = await backend_of_next_autocommit(small_pool)
    assert checked_out(small_pool) == 1  # kept, not returned
    assert await backend_of_next_autocommit(small_pool) == first
    assert checked_out(small_pool) == 1


async def test_a_connection_whose_work_failed_goes_back_to_the_pool(small_pool: Database) -> None:
    with pytest.raises(LookupError):
        async with small_pool.autocommit() as conn:
            await conn.execute(BACKEND)
            raise LookupError("the work failed after its statement")
    assert checked_out(small_pool) == 0


async def test_a_connection_left_in_a_sqlalchemy_transaction_goes_back(
    small_pool: Database,
) -> None:
    async with small_pool.autocommit() as conn:
        await conn.execute(text("SELECT 1"))  # not hot: through SQLAlchemy
    assert checked_out(small_pool) == 0


async def test_at_most_half_the_pool_is_kept(small_pool: Database) -> None:
    release = asyncio.Event()
    all_inside = asyncio.Barrier(5)

    async def hold() -> None:
        async with small_pool.autocommit() as conn:
            await conn.execute(BACKEND)
            await all_inside.wait()
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(4)]
    await all_inside.wait()
    assert checked_out(small_pool) == 4
    release.set()
    await asyncio.gather(*holders)
    assert checked_out(small_pool) == 2
    # The rest of the pool serves a transaction and a read at the same time.
    async with small_pool.write() as tx, small_pool.read() as reader:
        await tx.execute(text("SELECT 1"))
        assert (await (await reader.sa()).execute(text("SELECT 2"))).scalar() == 2


async def test_dispose_closes_the_kept_connections(database_url: str) -> None:
    db = Database(Settings(database_url=database_url, db_pool_size=4))
    await backend_of_next_autocommit(db)
    await db.dispose()
    assert checked_out(db) == 0
