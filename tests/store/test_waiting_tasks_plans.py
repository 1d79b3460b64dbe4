"""SQLite reads the claim queue and the waiting tasks off their own partial indexes (EXPLAIN
QUERY PLAN), so a claim and a queue position never step over the tasks that wait for their
``run_at``: the claim queue index holds none of them, and the waiting ones are read by due
time. (PostgreSQL's plans: ``test_claim_plan.py``.)"""

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from taskhub.clock import utcnow
from taskhub.rules.states import TaskStatus
from taskhub.settings import Settings
from taskhub.store.claims import ClaimFrom, claim_statement, claimable_left_statement
from taskhub.store.database import Database
from taskhub.store.queue_positions import position_query
from tests.support.databases import create_schema_from_models
from tests.support.records import a_task_record


@pytest.fixture
async def database_url(tmp_path: Path) -> AsyncIterator[str]:
    """SQLite only (this module's subject)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
    db = Database(Settings(database_url=url))
    await create_schema_from_models(db)
    await db.dispose()
    yield url


async def query_plan(db: Database, statement) -> str:
    """SQLite's plan of ``statement`` (its parameters do not change the plan)."""
    async with db.read() as conn:
        compiled = statement.compile(dialect=conn.dialect)
        values = tuple(None for _ in compiled.positiontup or ())
        plan = await (await conn.sa()).exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", values)
        return "\n".join(row[-1] for row in plan)


@pytest.mark.parametrize("check_owner", [True, False])
async def test_a_claim_reads_the_claim_queue_in_order(db: Database, check_owner: bool) -> None:
    plan = await query_plan(db, claim_statement("sqlite", check_owner=check_owner, limit=2))
    assert "USING INDEX ix_task_claim_queue" in plan, plan
    assert "ix_task_delayed" not in plan and "SCAN task" not in plan, plan
    # A limited job's running tasks are counted on their own small indexes, never on all of
    # a room's tasks of the job.
    assert "ix_task_limited_active_room" in plan and "ix_task_job_room_created" not in plan


@pytest.mark.parametrize("source", [ClaimFrom.DUE_WAITING, ClaimFrom.BOTH])
async def test_a_claim_of_due_waiting_tasks_reads_them_by_due_time(
    db: Database, source: ClaimFrom
) -> None:
    statement = claim_statement("sqlite", check_owner=True, limit=2, source=source)
    plan = await query_plan(db, statement)
    assert "USING INDEX ix_task_delayed" in plan, plan
    assert ("ix_task_claim_queue" in plan) == (source == ClaimFrom.BOTH), plan
    assert "SCAN task" not in plan, plan


async def test_asking_whether_anything_is_claimable_reads_both_indexes(db: Database) -> None:
    plan = await query_plan(db, claimable_left_statement("sqlite"))
    assert "ix_task_claim_queue" in plan and "ix_task_delayed" in plan, plan
    assert "SCAN task" not in plan, plan


@pytest.mark.parametrize("delayed", [False, True])
async def test_a_position_counts_queued_tasks_and_waiting_ones_on_their_indexes(
    db: Database, delayed: bool
) -> None:
    now = utcnow()
    run_at = now + timedelta(hours=1) if delayed else None
    record = a_task_record(status=TaskStatus.PENDING, created_at=now, run_at=run_at)
    statement, _ = position_query(record, now)
    plan = await query_plan(db, statement)
    assert "task_queue_bucket" in plan, plan
    assert "ix_task_delayed" in plan, plan
    assert ("ix_task_claim_queue" in plan) != delayed, plan
    assert "SCAN task" not in plan, plan
