"""PostgreSQL's guard of running limits (``rules.running_limits``): two claims of one
limited job that each saw room for one more task cannot both commit past the limit — the
trigger re-counts under a per-job lock and refuses the later one (SQLSTATE TH001), which
changes nothing."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import insert, update

from taskhub.clock import new_id, utcnow
from taskhub.rules.running_limits import LIMIT_RACE_SQLSTATE
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.tables import job_table, task_table, user_table
from tests.support.databases import _asyncpg_dsn
from tests.support.rows import add_job, add_tasks

pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)

CLAIM = "UPDATE task SET status = 'claimed' WHERE id = $1"


async def test_the_later_of_two_racing_claims_is_refused(db: Database, settings: Settings):
    job_id = await add_job(db)
    user_id = new_id()
    async with db.write() as conn:
        await conn.execute(insert(user_table).values(id=user_id, name="u", created_at=utcnow()))
        await conn.execute(
            update(job_table).where(job_table.c.id == job_id).values(max_running_per_submitter=1)
        )
    first, second = await add_tasks(
        db, job_id, [utcnow(), utcnow()], submitted_by=user_id, limited=True
    )
    dsn = _asyncpg_dsn(settings.database_url)
    one, other = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        transaction = one.transaction()
        await transaction.start()
        await one.execute(CLAIM, first)  # room for one: it holds the job's lock now
        racing = asyncio.ensure_future(other.execute(CLAIM, second))
        await asyncio.sleep(0.3)
        assert not racing.done(), "the second claim waits for the first to commit"
        await transaction.commit()
        with pytest.raises(asyncpg.PostgresError) as refused:
            await racing
        assert refused.value.sqlstate == LIMIT_RACE_SQLSTATE
        statuses = {
            row["id"]: row["status"]
            for row in await one.fetch("SELECT id, status FROM task WHERE job_id = $1", job_id)
        }
        assert statuses == {first: "claimed", second: "pending"}
    finally:
        await one.close()
        await other.close()


async def test_tasks_of_unlimited_jobs_are_not_counted(db: Database, settings: Settings):
    job_id = await add_job(db)
    tasks = await add_tasks(db, job_id, [utcnow()] * 3)
    async with db.write() as conn:
        result = await conn.execute(
            update(task_table).where(task_table.c.id.in_(tasks)).values(status="claimed")
        )
    assert result.rowcount == 3
