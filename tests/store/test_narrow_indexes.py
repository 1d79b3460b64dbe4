"""The partial task indexes of migration 0007 hold only the rows their queries read, and
those queries still reach them on both engines (EXPLAIN, on a table of mostly finished
tasks that keep their worker and last lease, as real ones do)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import event, func, insert, select, text
from sqlalchemy.sql import Executable

from taskhub.clock import new_id, utcnow
from taskhub.rules.states import ACTIVE_STATUSES
from taskhub.services.sweeps import end_expired_leases
from taskhub.store.database import Database
from taskhub.store.hot_statements import Compiled
from taskhub.store.tables import ACTIVE_VALUES, task_table, user_table, worker_table
from taskhub.store.tasks import IDEMPOTENT_REPLAY
from taskhub.store.workers import EXTEND_ALL_LEASES
from tests.support.rows import add_job

FINISHED = 4000


async def seed(db: Database) -> dict[str, Any]:
    """Completed tasks of one job (each with a worker and its last lease, none with an
    idempotency key) and a few live ones: a claimed and a running task with keys (their
    leases just ran out), a pending one."""
    now = utcnow()
    user, worker = new_id(), new_id()
    async with db.write() as conn:
        await conn.execute(insert(user_table).values(id=user, name="indexes", created_at=now))
        await conn.execute(
            insert(worker_table).values(id=worker, user_id=user, last_heartbeat=now, created_at=now)
        )
    job = await add_job(db)
    common = {"job_id": job, "room_id": "room1", "payload": {}, "attempt": 1}
    finished = [
        common
        | {
            "id": new_id(),
            "status": "completed",
            "created_at": now - timedelta(hours=1, seconds=n),
            "completed_at": now - timedelta(hours=1),
            "worker_id": new_id(),
            "submitted_by": user,
            "lease_expires_at": now - timedelta(minutes=50),
        }
        for n in range(FINISHED)
    ]
    live = [
        common
        | {
            "id": new_id(),
            "status": status,
            "created_at": now,
            "worker_id": worker,
            "submitted_by": user,
            "idempotency_key": f"key-{status}",
            "lease_expires_at": now - timedelta(seconds=1),
        }
        for status in ("claimed", "running")
    ]
    pending = common | {
        "id": new_id(),
        "status": "pending",
        "created_at": now,
        "turn_at": now,
        "attempt": 0,
    }
    async with db.write() as conn:
        for rows in (finished, live, [pending]):  # executemany wants alike rows
            await conn.execute(insert(task_table), rows)
        await conn.execute(text("ANALYZE"))
    return {"user": user, "worker": worker, "job": job, "live": [row["id"] for row in live]}


async def explain(db: Database, sql: str, parameters: Any) -> str:
    """The engine's plan for ``sql`` (its driver's parameter style) as one text."""
    prefix = "EXPLAIN QUERY PLAN" if db.is_sqlite else "EXPLAIN"
    async with db.read() as conn:
        plan = await (await conn.sa()).exec_driver_sql(f"{prefix} {sql}", parameters)
        return "\n".join(" ".join(str(column) for column in row) for row in plan)


async def explain_statement(db: Database, statement: Executable, params: dict) -> str:
    """The plan of ``statement`` with ``params`` as the driver receives them."""
    async with db.read() as conn:
        compiled = Compiled(statement, (await conn.sa()).dialect)
    return await explain(db, compiled.sql, tuple(compiled.arguments(params)))


def reads_only(plan: str, index: str) -> None:
    assert index in plan, plan
    assert "Seq Scan on task" not in plan and "SCAN task" not in plan, plan


def test_the_lease_index_holds_the_domains_active_statuses() -> None:
    assert set(ACTIVE_VALUES) == {status.value for status in ACTIVE_STATUSES}


async def test_the_lease_sweep_reads_only_active_tasks_leases(db: Database) -> None:
    seeded = await seed(db)
    statements: list[tuple[str, Any]] = []

    def record(_conn, _cursor, statement, parameters, _context, _many) -> None:
        if "lease_expires_at <" in statement:
            statements.append((statement, parameters))

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        ended, _events = await end_expired_leases(db, utcnow())
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
    assert ended == 2  # both live tasks' leases ran out; the finished ones are left alone
    assert len(statements) == 2  # the retryable ones, then the failing update
    for statement, parameters in statements:
        reads_only(await explain(db, statement, parameters), "ix_task_active_lease")
    async with db.read() as conn:
        failed = await conn.scalar(
            select(func.count())
            .select_from(task_table)
            .where(task_table.c.id.in_(seeded["live"]), task_table.c.status == "failed")
        )
    assert failed == 2


async def test_a_heartbeat_extends_leases_through_the_assigned_worker_index(db: Database) -> None:
    seeded = await seed(db)
    params = {"b_worker_id": seeded["worker"], "b_until": utcnow()}
    plan = await explain_statement(db, EXTEND_ALL_LEASES, params)
    reads_only(plan, "ix_task_assigned_worker")


async def test_an_idempotent_replay_is_found_through_the_keyed_index(db: Database) -> None:
    seeded = await seed(db)
    params = {"b_user": seeded["user"], "b_job": seeded["job"], "b_key": "key-running"}
    plan = await explain_statement(db, IDEMPOTENT_REPLAY, params)
    reads_only(plan, "ix_task_idempotency_keyed")
