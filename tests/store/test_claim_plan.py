"""The claim statement and the queue position are served by their indexes on PostgreSQL
(EXPLAIN), not by a scan of the task table, on a table large enough for the planner to
care."""

from datetime import timedelta
from uuid import uuid4

import pytest
from sqlalchemy import insert, text

from taskhub.clock import new_id, utcnow
from taskhub.store.claims import ClaimFrom, claim_statement
from taskhub.store.database import Database
from taskhub.store.queue_positions import position_query
from taskhub.store.tables import job_table, link_table, task_table, user_table, worker_table
from taskhub.store.task_rows import SELECT_TASKS, joined_record

pytestmark = pytest.mark.postgres_only


async def seed(db: Database, jobs: int = 20, tasks_per_job: int = 1000) -> dict:
    """``jobs`` jobs with mostly finished tasks and some pending ones; one worker serving
    the first job."""
    now = utcnow()
    user, worker = new_id(), new_id()
    job_ids = [new_id() for _ in range(jobs)]
    async with db.write() as conn:
        await conn.execute(insert(user_table).values(id=user, name="planner", created_at=now))
        await conn.execute(
            insert(worker_table).values(id=worker, user_id=user, last_heartbeat=now, created_at=now)
        )
        await conn.execute(
            insert(job_table),
            [
                {
                    "id": job_id,
                    "room_id": "room1",
                    "category": "modifiers",
                    "name": f"Job{n}",
                    "schema": {},
                    "deleted": False,
                    "created_at": now,
                    "updated_at": now,
                }
                for n, job_id in enumerate(job_ids)
            ],
        )
        await conn.execute(insert(link_table).values(worker_id=worker, job_id=job_ids[0]))
        rows = [
            {
                "id": new_id(),
                "job_id": job_id,
                "room_id": "room1",
                "status": "pending" if n % 10 == 0 else "completed",
                "payload": {},
                "created_at": now + timedelta(microseconds=n),
                "turn_at": now + timedelta(microseconds=n),
                "attempt": 0,
            }
            for job_id in job_ids
            for n in range(tasks_per_job)
        ]
        await conn.execute(insert(task_table), rows)
        await conn.execute(text("ANALYZE task"))
        await conn.execute(text("ANALYZE job"))
        await conn.execute(text("ANALYZE worker_job_link"))
    return {"worker_id": worker, "owner_id": user}


async def explain(db: Database, statement, params: dict) -> str:
    """The plan of ``statement`` with ``params``, as the driver would run it."""
    async with db.read() as conn:
        compiled = statement.compile(dialect=conn.dialect)
        bound = compiled.construct_params(params)
        values = tuple(bound[name] for name in compiled.positiontup)
        plan = await (await conn.sa()).exec_driver_sql(f"EXPLAIN {compiled}", values)
        return "\n".join(row[0] for row in plan)


@pytest.mark.parametrize("check_owner", [True, False])
async def test_the_claim_uses_the_claim_queue_index(db: Database, check_owner: bool):
    ids = await seed(db)
    statement = claim_statement("postgresql", check_owner=check_owner, limit=1)
    now = utcnow()
    plan = await explain(
        db,
        statement,
        {**ids, "claim_token": uuid4(), "claim_key": None, "lease_until": now, "now": now},
    )
    assert "ix_task_claim_queue" in plan, plan
    assert "Seq Scan on task" not in plan, plan
    # The queue is read in index order and the scan stops at the head: no sort of tasks.
    assert "Sort Key: task" not in plan, plan


@pytest.mark.parametrize("check_owner", [True, False])
async def test_a_claim_of_due_waiting_tasks_reads_them_by_due_time(db: Database, check_owner: bool):
    """The few due tasks the announcer has not queued yet are read off the index of waiting
    tasks by due time (and sorted there); the claim queue is not read."""
    ids = await seed(db)
    source = ClaimFrom.DUE_WAITING
    statement = claim_statement("postgresql", check_owner=check_owner, limit=1, source=source)
    now = utcnow()
    plan = await explain(
        db,
        statement,
        {**ids, "claim_token": uuid4(), "claim_key": None, "lease_until": now, "now": now},
    )
    lines = plan.splitlines()
    sorts = [n for n, line in enumerate(lines) if "Sort Key: task" in line]
    assert len(sorts) == 1, plan
    assert "Index Scan using ix_task_delayed" in lines[sorts[0] + 1], plan
    assert "Seq Scan on task" not in plan, plan


@pytest.mark.parametrize("kind", ["early in its second", "late in its second", "delayed"])
async def test_the_queue_position_reads_counts_and_index_ranges(db: Database, kind: str):
    """A position sums the kept counts and counts index ranges (from either end of the
    task's own second); it never scans the tasks."""
    await seed(db)
    async with db.read() as conn:
        rows = await conn.execute(
            SELECT_TASKS.where(task_table.c.status == "pending").order_by(task_table.c.id.desc())
        )
        record = joined_record(rows.first())
    now = utcnow()
    delayed = kind == "delayed"
    if delayed:
        record.run_at = now + timedelta(hours=1)
    else:
        late = kind == "late in its second"
        record.created_at = record.created_at.replace(microsecond=900_000 if late else 100_000)
    statement, params = position_query(record, now)
    plan = await explain(db, statement, params)
    assert "pk_task_queue_bucket" in plan, plan
    assert ("ix_task_delayed" in plan) and ("ix_task_claim_queue" in plan) != delayed, plan
    assert "Seq Scan" not in plan, plan
    if delayed:  # the waiting tasks due after it: the index range starts at its due time
        assert "run_at >= " in plan.split("ix_task_delayed", 1)[1], plan
