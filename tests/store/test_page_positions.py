"""A page of tasks (``with_positions``) reads the queue positions of all its pending tasks in
one statement, whatever their number: the same places each task's own statement reads
(``queue_position``), for ready and delayed tasks of every priority, inside busy seconds,
across jobs; on SQLite and PostgreSQL."""

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import or_, update

from taskhub.clock import utcnow
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.store import page_positions
from taskhub.store.database import Database
from taskhub.store.page_positions import with_positions
from taskhub.store.queue_positions import queue_position
from taskhub.store.tables import job_table, task_table
from taskhub.store.task_rows import SELECT_TASKS
from tests.support import rows as support_rows
from tests.support.rows import add_tasks

task, job = task_table, job_table
SECOND = datetime(2026, 11, 21, 12, 0, 7, tzinfo=UTC)
EDGES = [0, 1, 499_999, 499_999, 500_000, 999_999]  # microseconds; one moment twice


def at(seconds: int, microseconds: int = 0) -> datetime:
    return SECOND + timedelta(seconds=seconds, microseconds=microseconds)


class CountingConnection:
    """A connection that counts the statements sent through it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements = 0

    @property
    def dialect(self) -> Any:
        return self.conn.dialect

    async def execute(self, statement: Any, params: Any = None) -> Any:
        self.statements += 1
        return await self.conn.execute(statement, params)

    async def scalar(self, statement: Any, params: Any = None) -> Any:
        self.statements += 1
        return await self.conn.scalar(statement, params)


async def add_job(db: Database) -> UUID:
    """A job of its own name (``rows.add_job`` names jobs by the time their id was made)."""
    job_id = await support_rows.add_job(db)
    async with db.write() as conn:
        await conn.execute(update(job).where(job.c.id == job_id).values(name=f"Job{job_id.hex}"))
    return job_id


async def add_busy_job(db: Database, now: datetime) -> UUID:
    """A job whose queue holds ready and delayed tasks of three priorities, most of them in
    busy seconds (same moments, both halves of a second), a ready task with a past
    ``run_at``, delayed tasks due at the same moment, and a claimed one."""
    job_id = await add_job(db)
    moments = [at(s, us) for s in (-1, 0, 1) for us in EDGES]
    await add_tasks(db, job_id, moments)
    await add_tasks(db, job_id, moments[::3], priority=5)
    await add_tasks(db, job_id, moments[1::4], priority=-3, run_at=now - timedelta(minutes=1))
    soon, later = now + timedelta(minutes=5), now + timedelta(hours=1)
    await add_tasks(db, job_id, moments[::2], run_at=soon)
    await add_tasks(db, job_id, moments[1::2], priority=5, run_at=soon)
    await add_tasks(db, job_id, moments[::5], priority=-3, run_at=later)
    claimed = (await add_tasks(db, job_id, [at(0, 499_999)]))[0]
    async with db.write() as conn:
        await conn.execute(update(task).where(task.c.id == claimed).values(status="claimed"))
    return job_id


async def alone(conn: Any, records: list[TaskRecord], now: datetime) -> dict[UUID, int | None]:
    """Each record's position read by its own statement."""
    return {record.id: await queue_position(conn, record, now) for record in records}


async def test_a_page_has_the_places_its_tasks_have_alone(db: Database) -> None:
    now = utcnow()
    first, second = await add_busy_job(db, now), await add_busy_job(db, now)
    pages = {
        "two jobs": [task.c.job_id.in_([first, second])],
        "one job": [task.c.job_id == first],
        "its ready tasks": [
            task.c.job_id == first,
            or_(task.c.run_at.is_(None), task.c.run_at <= now),
        ],
        "its delayed tasks": [task.c.job_id == second, task.c.run_at > now],
    }
    async with db.read() as conn:
        for name, where in pages.items():
            statement = SELECT_TASKS.where(*where).order_by(task.c.created_at, task.c.id)
            rows = (await conn.execute(statement)).all()
            few = page_positions.FEW
            assert len(rows) > few
            # Many tasks are ranked among the counted rows, a few counted one by one.
            for part in (rows, rows[::5][:few], rows[-few:]):
                records = await with_positions(conn, part, now)
                positions = {record.id: record.queue_position for record in records}
                assert positions == await alone(conn, records, now), name
                pending = {record.id: record.status == TaskStatus.PENDING for record in records}
                assert {key: value is not None for key, value in positions.items()} == pending


async def test_a_page_reads_its_positions_in_one_statement(db: Database) -> None:
    now = utcnow()
    first, second = await add_job(db), await add_job(db)
    for job_id in (first, second):
        await add_tasks(
            db, job_id, [at(0, us) for us in range(300)], run_at=now + timedelta(hours=1)
        )
        await add_tasks(db, job_id, [at(1, us) for us in range(40)])
    async with db.read() as conn:
        for where, pending in [
            ([task.c.job_id == first, task.c.run_at.is_(None)], 2),
            ([task.c.job_id == first], 340),
            ([task.c.job_id.in_([first, second])], 680),
        ]:
            statement = SELECT_TASKS.where(*where).order_by(task.c.created_at).limit(pending)
            rows = (await conn.execute(statement)).all()
            counting = CountingConnection(conn)
            records = await with_positions(counting, rows, now)
            assert sum(record.queue_position is not None for record in records) == pending
            assert counting.statements == 1


async def test_a_page_without_pending_tasks_reads_no_position(db: Database) -> None:
    job_id = await add_job(db)
    await add_tasks(db, job_id, [at(0, us) for us in range(5)], status="completed")
    async with db.read() as conn:
        rows = (await conn.execute(SELECT_TASKS.where(task.c.job_id == job_id))).all()
        counting = CountingConnection(conn)
        records = await with_positions(counting, rows)
    assert [record.queue_position for record in records] == [None] * 5
    assert counting.statements == 0


async def test_a_page_whose_tasks_left_the_queue_since_it_was_read_still_has_positions(
    db: Database,
) -> None:
    """The page's rows and their positions are two statements: by the second, every task of
    the job may have been claimed (its count rows gone). The page is still answered, each
    of its tasks with the place its own statement would read then."""
    now = utcnow()
    job_id = await add_job(db)
    await add_tasks(db, job_id, [at(0, us) for us in range(12)], run_at=now + timedelta(hours=1))
    async with db.read() as conn:
        rows = (await conn.execute(SELECT_TASKS.where(task.c.job_id == job_id))).all()
    async with db.write() as conn:
        await conn.execute(update(task).where(task.c.job_id == job_id).values(status="claimed"))
    async with db.read() as conn:
        records = await with_positions(conn, rows, now)
        assert len(records) > page_positions.FEW
        positions = {record.id: record.queue_position for record in records}
        assert positions == await alone(conn, records, now)
