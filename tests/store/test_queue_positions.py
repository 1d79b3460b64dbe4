"""A pending task's ``queue_position`` is its 1-based place in its job's queue: ready tasks
by priority (higher first), then FIFO (``created_at``, then ``id``); the delayed ones after
them by due time. It holds for tasks anywhere in a busy second (the kept per-second counts
and the rows inside the task's own second must add up), on SQLite and PostgreSQL."""

from datetime import UTC, datetime, timedelta
from uuid import UUID

from sqlalchemy import update

from taskhub.clock import utcnow
from taskhub.store.database import Database
from taskhub.store.queue_positions import queue_position
from taskhub.store.tables import task_table
from taskhub.store.task_rows import load_task
from tests.support.rows import add_job, add_tasks

SECOND = datetime(2026, 11, 21, 12, 0, 7, tzinfo=UTC)
EDGES = [0, 1, 499_999, 499_999, 999_500, 999_999]  # microseconds; one moment twice


def at(seconds: int, microseconds: int = 0) -> datetime:
    return SECOND + timedelta(seconds=seconds, microseconds=microseconds)


async def positions(db: Database, task_ids: list[UUID]) -> dict[UUID, int | None]:
    async with db.read() as conn:
        return {task_id: (await load_task(conn, task_id)).queue_position for task_id in task_ids}


async def test_every_pending_task_has_its_place_across_busy_seconds(db: Database) -> None:
    job_id = await add_job(db)
    moments = [at(s, us) for s in (-1, 0, 1) for us in EDGES]
    ready = await add_tasks(db, job_id, moments)
    urgent = await add_tasks(db, job_id, [at(1, 5), at(0, 7)], priority=5)
    delayed = await add_tasks(db, job_id, [at(0, 3)], run_at=utcnow() + timedelta(hours=1))
    taken = ready[8]  # in the middle of the busy second: out of the queue
    async with db.write() as conn:
        await conn.execute(
            update(task_table).where(task_table.c.id == taken).values(status="claimed")
        )

    def fifo(task_id: UUID) -> tuple[datetime, UUID]:
        return moments[ready.index(task_id)], task_id

    expected_order = [urgent[1], urgent[0]]
    expected_order += sorted((t for t in ready if t != taken), key=fifo)
    expected_order += delayed
    expected = {task_id: place for place, task_id in enumerate(expected_order, start=1)}
    expected[taken] = None

    assert await positions(db, [*ready, *urgent, *delayed]) == expected


async def test_a_task_claimed_before_its_place_is_read_was_at_the_head(db: Database) -> None:
    """Its record (read, or just inserted, as pending) comes before the read of its place;
    a claim in between takes it out of the counts, which must not make its place 0."""
    job_id = await add_job(db)
    (first,) = await add_tasks(db, job_id, [at(0)])
    async with db.read() as conn:
        record = await load_task(conn, first)
    async with db.write() as conn:
        await conn.execute(
            update(task_table).where(task_table.c.id == first).values(status="claimed")
        )
    async with db.read() as conn:
        assert await queue_position(conn, record) == 1
