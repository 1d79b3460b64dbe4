"""Seeding a running hub's database from the benchmark's process, through the store's own
seeding statements (``taskhub.store.seeding``): many rows a statement, a few thousand a
transaction. Scenarios build the rows (``SeedTask``), this writes them.

``bulk_seed_tasks`` is the fast way for millions of rows: on PostgreSQL ``COPY`` into the
store's ``task`` table (the columns the store's seed statement writes, the others their
defaults; the table's triggers count every row as an insert would), on SQLite the store's
seed statement; the next chunk is built in a thread while the last one is written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from itertools import islice
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import asyncpg

from benchmarks.harness.targets import Target, TargetError
from taskhub.json_codec import dump_json
from taskhub.services.users import hash_token
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.seeding import SeedTask, insert_seed_tasks, insert_seed_users
from taskhub.store.tables import task_table
from taskhub.store.users import find_token

SEED_CHUNK = 5000  # rows a transaction
SEED_STEP = timedelta(milliseconds=1)  # between consecutive seeded tasks' created_at
# Rows a COPY (and a transaction) on PostgreSQL. Small: the usage-count trigger updates the
# submitter's ``user_usage`` row for every task, and each update of a row walks the versions
# its transaction left before (5,000 rows over 1,000 submitters seeded a fifth faster than
# 20,000 over 200).
COPY_CHUNK = 5000
# What ``taskhub.store.seeding`` writes of a task, in the order ``copy_record`` gives it.
COPY_COLUMNS = (
    "id",
    "job_id",
    "room_id",
    "status",
    "payload",
    "created_at",
    "turn_at",
    "share_key",
    "run_at",
    "waiting",
    "started_at",
    "completed_at",
    "worker_id",
    "error",
    "submitted_by",
    "attempt",
)
T = TypeVar("T")
assert set(COPY_COLUMNS) <= set(task_table.c.keys()), "the task table lost a seeded column"


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


def copy_record(task: SeedTask) -> tuple[Any, ...]:
    """``task`` as a row of ``COPY_COLUMNS`` for asyncpg's binary COPY (the payload as the
    JSON text the hub's engines write)."""
    return (
        task.id,
        task.job_id,
        task.room_id,
        task.status,
        dump_json(task.payload),
        task.created_at,
        task.created_at if task.turn_at is None else task.turn_at,
        task.share_key,
        task.run_at,
        task.run_at is not None,
        task.started_at,
        task.completed_at,
        task.worker_id,
        task.error,
        task.submitted_by,
        task.attempt,
    )


def asyncpg_url(database_url: str) -> str:
    """A ``postgresql+asyncpg://`` SQLAlchemy URL as asyncpg takes it."""
    parts = urlsplit(database_url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))


async def bulk_seed_tasks(target: Target, tasks: Iterable[SeedTask]) -> int:
    """Insert ``tasks`` into the running hub's database as fast as the engine takes them
    (PostgreSQL: ``COPY_CHUNK`` rows a ``COPY``; SQLite: the store's seed statement,
    ``SEED_CHUNK`` rows a transaction), each chunk built in a thread while the previous one
    is written. Returns how many went in."""
    if target.database_url is None:
        raise TargetError(f"the database of target {target.name} is unknown")
    iterator = iter(tasks)
    if target.database_url.startswith("sqlite"):

        def next_rows() -> list[SeedTask]:
            return list(islice(iterator, SEED_CHUNK))

        async with hub_database(target) as db:

            async def write(rows: list[SeedTask]) -> None:
                async with db.write() as conn:
                    await insert_seed_tasks(conn, rows)

            return await _pipelined(next_rows, write)

    def next_records() -> list[tuple[Any, ...]]:
        return [copy_record(task) for task in islice(iterator, COPY_CHUNK)]

    conn = await asyncpg.connect(asyncpg_url(target.database_url), timeout=10)
    try:

        async def copy(records: list[tuple[Any, ...]]) -> None:
            async with conn.transaction():
                await conn.copy_records_to_table("task", records=records, columns=COPY_COLUMNS)

        return await _pipelined(next_records, copy)
    finally:
        await conn.close()


async def _pipelined(
    build: Callable[[], list[T]], write: Callable[[list[T]], Awaitable[None]]
) -> int:
    """Write what ``build()`` (run in a thread) gives until it gives nothing, building the
    next chunk while the last is written; how many rows were written."""
    written = 0
    rows: list[T] = await asyncio.to_thread(build)
    while rows:
        writing = asyncio.ensure_future(write(rows))
        try:
            following: list[T] = await asyncio.to_thread(build)
        finally:
            await writing
        written += len(rows)
        rows = following
    return written
