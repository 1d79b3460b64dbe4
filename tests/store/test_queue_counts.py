"""The database keeps ``task_queue_bucket`` exact: pending tasks per (job, priority, second
of ``created_at``), through inserts, status changes and deletes, in the second that
``bucket_of`` names — also at the edges of a second, which SQLite's date functions would
round to milliseconds."""

from collections import Counter
from datetime import UTC, datetime, timedelta
from uuid import UUID

from sqlalchemy import delete, select, update

from taskhub.store.database import Database
from taskhub.store.queue_counts import bucket_of, bucket_start
from taskhub.store.tables import queue_bucket_table, task_table
from tests.support.rows import add_job, add_tasks

SECOND = datetime(2026, 11, 21, 12, 0, 7, tzinfo=UTC)
EDGES = [0, 1, 499_999, 999_499, 999_500, 999_999]  # microseconds into a second


async def kept_counts(db: Database, job_id: UUID) -> dict[tuple[int, int], int]:
    """``(priority, bucket) -> pending`` as the triggers left them."""
    b = queue_bucket_table
    async with db.read() as conn:
        rows = await conn.execute(
            select(b.c.priority, b.c.bucket, b.c.pending).where(b.c.job_id == job_id)
        )
        return {(row.priority, row.bucket): row.pending for row in rows}


async def set_status(db: Database, task_ids: list[UUID], status: str) -> None:
    async with db.write() as conn:
        await conn.execute(
            update(task_table).where(task_table.c.id.in_(task_ids)).values(status=status)
        )


def test_a_bucket_is_a_whole_second_since_the_epoch() -> None:
    assert bucket_of(SECOND) == int(SECOND.timestamp())
    assert bucket_of(SECOND + timedelta(microseconds=999_999)) == bucket_of(SECOND)
    assert bucket_of(SECOND - timedelta(microseconds=1)) == bucket_of(SECOND) - 1
    assert bucket_start(bucket_of(SECOND + timedelta(milliseconds=500))) == SECOND


async def test_each_pending_task_is_counted_in_its_own_second(db: Database) -> None:
    job_id = await add_job(db)
    moments = [SECOND + timedelta(seconds=s, microseconds=us) for s in (0, 1) for us in EDGES]
    await add_tasks(db, job_id, moments)
    await add_tasks(db, job_id, moments[:2], priority=5)
    expected = Counter((0, bucket_of(moment)) for moment in moments)
    expected[(5, bucket_of(SECOND))] = 2
    assert await kept_counts(db, job_id) == dict(expected)


async def test_counts_follow_tasks_out_of_the_queue_and_back(db: Database) -> None:
    job_id = await add_job(db)
    first, second, third = await add_tasks(db, job_id, [SECOND, SECOND, SECOND])
    here = (0, bucket_of(SECOND))
    assert await kept_counts(db, job_id) == {here: 3}

    await set_status(db, [first], "claimed")
    assert await kept_counts(db, job_id) == {here: 2}
    await set_status(db, [first], "running")  # not pending before or after: no change
    assert await kept_counts(db, job_id) == {here: 2}
    await set_status(db, [first], "pending")  # a retry returns it to the queue
    assert await kept_counts(db, job_id) == {here: 3}

    await set_status(db, [first, second], "cancelled")
    async with db.write() as conn:
        await conn.execute(delete(task_table).where(task_table.c.id == third))
    assert await kept_counts(db, job_id) == {}, "a bucket goes when its count reaches zero"


async def test_a_pending_task_that_moves_is_counted_where_it_moved(db: Database) -> None:
    job_id = await add_job(db)
    (task_id,) = await add_tasks(db, job_id, [SECOND])
    async with db.write() as conn:
        await conn.execute(update(task_table).where(task_table.c.id == task_id).values(priority=2))
    assert await kept_counts(db, job_id) == {(2, bucket_of(SECOND)): 1}


async def test_a_task_inserted_without_a_turn_takes_its_submission_time(db: Database) -> None:
    """What a replica older than migration 0015 writes: a FIFO turn, counted there."""
    job_id = await add_job(db)
    (task_id,) = await add_tasks(db, job_id, [SECOND], turn_at=None)
    async with db.read() as conn:
        turn = await conn.scalar(select(task_table.c.turn_at).where(task_table.c.id == task_id))
    assert turn == SECOND
    assert await kept_counts(db, job_id) == {(0, bucket_of(SECOND)): 1}
