"""The benchmarks' bulk seeding (``store.seeding``): rows stored as given (a ``run_at``
makes a task wait, a missing turn is its ``created_at``), counted in the queue by the same
triggers as a submit's, users without tokens, and fresh statistics on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, text

from taskhub.clock import new_id, utcnow
from taskhub.store.database import Database
from taskhub.store.seeding import (
    SeedTask,
    insert_seed_tasks,
    insert_seed_users,
    refresh_statistics,
)
from taskhub.store.tables import queue_bucket_table, task_table, user_table
from tests.support.rows import add_job


async def test_tasks_are_stored_as_given(db: Database) -> None:
    job_id, now = await add_job(db), utcnow()
    user, worker = new_id(), new_id()
    async with db.write() as conn:
        await insert_seed_users(conn, [(user, "seeded-user")], now)
    waiting = SeedTask(new_id(), job_id, "room1", now, user, run_at=now + timedelta(hours=1))
    fair = SeedTask(
        new_id(), job_id, "room1", now, user, turn_at=now + timedelta(seconds=3), share_key="s"
    )
    done = SeedTask(
        new_id(),
        job_id,
        "room1",
        now - timedelta(minutes=1),
        user,
        status="failed",
        payload={"angle": 3},
        started_at=now - timedelta(seconds=50),
        completed_at=now - timedelta(seconds=40),
        worker_id=worker,
        error="Disk full",
        attempt=1,
    )
    async with db.write() as conn:
        await insert_seed_tasks(conn, [waiting, fair, done])
        await insert_seed_tasks(conn, [])  # nothing to insert: no statement
    t = task_table
    async with db.read() as conn:
        rows = {row.id: row for row in await conn.execute(select(t))}
    assert set(rows) == {waiting.id, fair.id, done.id}
    assert rows[waiting.id].waiting and rows[waiting.id].run_at == waiting.run_at
    assert rows[waiting.id].turn_at == now  # its created_at: a FIFO turn
    assert not rows[fair.id].waiting and rows[fair.id].run_at is None
    assert (rows[fair.id].turn_at, rows[fair.id].share_key) == (fair.turn_at, "s")
    finished = rows[done.id]
    assert (finished.status, finished.payload, finished.error) == (
        "failed",
        {"angle": 3},
        done.error,
    )
    assert (finished.started_at, finished.completed_at) == (done.started_at, done.completed_at)
    assert (finished.worker_id, finished.attempt, finished.submitted_by) == (worker, 1, user)
    assert {row.version for row in rows.values()} == {1}  # the table's defaults for the rest
    async with db.read() as conn:
        names = (await conn.execute(select(user_table.c.name, user_table.c.is_superuser))).all()
    assert [tuple(row) for row in names] == [("seeded-user", False)]


async def test_pending_tasks_are_counted_in_the_queue(db: Database) -> None:
    job_id, now = await add_job(db), utcnow().replace(microsecond=0)
    pending = [SeedTask(new_id(), job_id, "room1", now, None) for _ in range(3)]
    waiting = SeedTask(new_id(), job_id, "room1", now, None, run_at=now + timedelta(hours=1))
    over = SeedTask(new_id(), job_id, "room1", now, None, status="completed")
    async with db.write() as conn:
        await insert_seed_tasks(conn, [*pending, waiting, over])
    b = queue_bucket_table
    async with db.read() as conn:
        counts = (
            await conn.execute(select(b.c.pending, b.c.waiting).where(b.c.job_id == job_id))
        ).all()
    assert [tuple(row) for row in counts] == [(4, 1)]  # the completed one is not queued


async def test_statistics_are_refreshed_on_postgres_only(db: Database) -> None:
    job_id, now = await add_job(db), utcnow()
    async with db.write() as conn:
        await insert_seed_tasks(
            conn, [SeedTask(new_id(), job_id, "room1", now, None) for _ in range(7)]
        )
    analyzed = await refresh_statistics(db, vacuum=False)
    vacuumed = await refresh_statistics(db, vacuum=True)
    if db.is_sqlite:
        assert analyzed is None and vacuumed is None
        return
    assert analyzed == "ANALYZE task, task_queue_bucket"
    assert vacuumed == "VACUUM ANALYZE task, task_queue_bucket"
    async with db.read() as conn:
        estimate = await conn.scalar(text("SELECT reltuples FROM pg_class WHERE relname = 'task'"))
    assert estimate == 7  # what the planner now knows of the seeded table
