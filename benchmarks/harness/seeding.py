"""Seeding a running hub's database from the benchmark's process, through the store's own
seeding statements (``taskhub.store.seeding``): many rows a statement, a few thousand a
transaction. Scenarios build the rows (``SeedTask``), this writes them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from itertools import islice
from uuid import UUID

from benchmarks.harness.targets import Target, TargetError
from taskhub.services.users import hash_token
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.seeding import SeedTask, insert_seed_tasks, insert_seed_users
from taskhub.store.users import find_token

SEED_CHUNK = 5000  # rows a transaction
SEED_STEP = timedelta(milliseconds=1)  # between consecutive seeded tasks' created_at


@asynccontextmanager
async def hub_database(target: Target) -> AsyncIterator[Database]:
    """The running hub's database, from this process (disposed of after)."""
    if target.database_url is None:
        raise TargetError(f"the database of target {target.name} is unknown")
    db = Database(Settings(database_url=target.database_url))
    try:
        yield db
    finally:
        await db.dispose()


async def token_user(db: Database, token: str) -> UUID | None:
    """The user ``token`` authenticates (the admin's, for a target's own token)."""
    async with db.read() as conn:
        return await find_token(conn, hash_token(token))


def chunks(tasks: Iterable[SeedTask], size: int = SEED_CHUNK) -> Iterator[list[SeedTask]]:
    """``tasks`` in lists of ``size`` (the last one shorter)."""
    iterator = iter(tasks)
    while chunk := list(islice(iterator, size)):
        yield chunk


async def seed_tasks(db: Database, tasks: Iterable[SeedTask]) -> None:
    """Insert ``tasks``, ``SEED_CHUNK`` a transaction, in their order."""
    for chunk in chunks(tasks):
        async with db.write() as conn:
            await insert_seed_tasks(conn, chunk)


async def seed_users(db: Database, users: list[tuple[UUID, str]], created_at: datetime) -> None:
    """Insert ordinary users (id, name) without tokens, in one transaction."""
    async with db.write() as conn:
        await insert_seed_users(conn, users, created_at)
