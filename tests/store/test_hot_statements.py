"""Hot statements run straight on the driver and give exactly what SQLAlchemy gives: the
same columns, values and Python types (UUIDs, aware datetimes, JSON documents, floats,
booleans), on both engines; anything not marked hot still runs through SQLAlchemy."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
from sqlalchemy import bindparam, insert, select, text, update
from sqlalchemy.engine import Result

from taskhub.clock import new_id, utcnow
from taskhub.settings import Settings
from taskhub.store.database import Database, DatabaseUnavailable
from taskhub.store.hot_statements import HotResult, hot
from taskhub.store.inserts import insert_task_of_live_job
from taskhub.store.queue_positions import position_before_insert, position_params
from taskhub.store.tables import job_table, link_table, task_table, user_table, worker_table
from taskhub.store.task_rows import SELECT_TASKS
from tests.support.databases import _asyncpg_dsn

task = task_table
LOAD = hot(SELECT_TASKS.where(task.c.id == bindparam("task_id")))
FINISH = hot(
    update(task)
    .where(task.c.id == bindparam("task_id"), task.c.status == "running")
    .values(status="completed", completed_at=bindparam("at"), result=bindparam("result"))
    .returning(*task.c, select(link_table.c.job_id).exists().label("job_served"))
)
PLAIN_LOAD = SELECT_TASKS.where(task.c.id == bindparam("task_id"))


async def seed_running_task(db: Database) -> dict[str, Any]:
    now = utcnow()
    ids = {"user": new_id(), "worker": new_id(), "job": new_id(), "task": new_id()}
    async with db.write() as conn:
        await conn.execute(insert(user_table).values(id=ids["user"], name="u", created_at=now))
        await conn.execute(
            insert(worker_table).values(
                id=ids["worker"], user_id=ids["user"], last_heartbeat=now, created_at=now
            )
        )
        await conn.execute(
            insert(job_table).values(
                id=ids["job"],
                room_id="room1",
                category="modifiers",
                name="Hot",
                schema={},
                deleted=False,
                created_at=now,
                updated_at=now,
                max_attempts=3,
            )
        )
        await conn.execute(
            insert(task).values(
                id=ids["task"],
                job_id=ids["job"],
                room_id="room1",
                status="running",
                payload={"nested": {"list": [1, 2.5, "three", None, True]}},
                created_at=now - timedelta(seconds=3),
                started_at=now,
                worker_id=ids["worker"],
                submitted_by=ids["user"],
                claim_token=new_id(),
                attempt=1,
                progress=0.25,
                progress_message="a quarter",
                lease_expires_at=now + timedelta(minutes=5),
                priority=2,
                max_attempts=3,
            )
        )
    return ids


def same_values(hot_row: Any, sa_row: Any, names: tuple[str, ...] | None = None) -> None:
    """Equal values of the same Python types (all of ``sa_row``'s columns, or ``names``)."""
    for name in names or tuple(sa_row._fields):
        hot_value, sa_value = getattr(hot_row, name), getattr(sa_row, name)
        assert type(hot_value) is type(sa_value), name
        assert hot_value == sa_value, name


async def test_a_hot_read_gives_what_sqlalchemy_gives(db: Database) -> None:
    ids = await seed_running_task(db)
    async with db.read() as conn:
        hot_result = await conn.execute(LOAD, {"task_id": ids["task"]})
        sa_row = (await (await conn.sa()).execute(LOAD, {"task_id": ids["task"]})).one()
    assert isinstance(hot_result, HotResult)
    row = hot_result.first()
    assert row._fields == tuple(sa_row._fields)
    same_values(row, sa_row)
    assert row.created_at.utcoffset() == timedelta(0)
    assert row.payload == {"nested": {"list": [1, 2.5, "three", None, True]}}
    assert row.progress == 0.25 and row.job_room_id == "room1"


async def test_a_hot_write_returns_typed_rows_and_is_committed(db: Database) -> None:
    ids = await seed_running_task(db)
    at = utcnow()
    async with db.autocommit() as conn:
        params = {"task_id": ids["task"], "at": at, "result": {"ok": [1]}}
        row = (await conn.execute(FINISH, params)).first()
        assert (await conn.execute(FINISH, params)).first() is None  # no longer running
    assert row.status == "completed" and row.completed_at == at
    assert row.result == {"ok": [1]} and row.job_served is False
    async with db.read() as conn:  # another connection sees it: it was committed
        stored = (
            await (await conn.sa()).execute(select(task).where(task.c.id == ids["task"]))
        ).one()
    assert row._fields == (*stored._fields, "job_served")
    same_values(row, stored)


async def test_none_is_written_as_sqlalchemy_writes_it(db: Database) -> None:
    """A None skips only the type processors that would keep it None: a JSON column's
    still writes JSON ``null``, as SQLAlchemy does, and a datetime stays SQL NULL."""
    task_id = (await seed_running_task(db))["task"]
    params = {"task_id": task_id, "at": None, "result": None}
    stored = select(task.c.result.is_(None), task.c.completed_at.is_(None)).where(
        task.c.id == task_id
    )
    written = []
    for hot_path in (True, False):
        async with db.autocommit() as conn:
            sa = await conn.sa()
            await sa.execute(update(task).where(task.c.id == task_id).values(status="running"))
            await (conn if hot_path else sa).execute(FINISH, params)
            written.append(tuple((await sa.execute(stored)).one()))
    assert written[0] == written[1] == (False, True)


async def test_a_text_statement_names_its_columns_as_the_driver_does(db: Database) -> None:
    ids = await seed_running_task(db)
    async with db.read() as conn:
        job = (await (await conn.sa()).execute(select(job_table))).one()
    now = utcnow()
    params = {
        "b_key": None,
        "b_digest": None,
        "b_id": new_id(),
        "b_job_id": job.id,
        "b_job_version": job.updated_at,
        "b_room_id": "room1",
        "b_payload": {},
        "b_created_at": now,
        "b_submitted_by": ids["user"],
        "b_attempt": 0,
        "b_priority": 0,
        "b_max_attempts": None,
        "b_run_at": None,
        "b_waiting": False,
        "b_rerun_of": None,
        "b_turn_at": now,
        "b_share_key": None,
        "b_share_backlogged": False,
    }
    if db.is_sqlite:
        statement = insert_task_of_live_job(db.dialect)
        expected: tuple[str, ...] = ("max_attempts",)
    else:  # PostgreSQL also reads the new task's place in the same statement
        new = SimpleNamespace(
            id=params["b_id"], job_id=job.id, priority=0, created_at=now, turn=now, run_at=None
        )
        statement = insert_task_of_live_job(db.dialect, position_before_insert(new, now))
        params |= position_params(new, now)
        expected = ("max_attempts", "queue_position")
    async with db.autocommit() as conn:
        row = (await conn.execute(statement, params)).first()
    assert row._fields == expected and row.max_attempts == 3


async def test_a_missing_parameter_sends_nothing(db: Database) -> None:
    ids = await seed_running_task(db)
    async with db.autocommit() as conn:
        with pytest.raises(KeyError, match="task_id"):
            await conn.execute(FINISH, {"at": utcnow(), "result": None})
        row = (await conn.execute(LOAD, {"task_id": ids["task"]})).first()
    assert row.status == "running"


async def test_statements_not_marked_hot_run_through_sqlalchemy(db: Database) -> None:
    ids = await seed_running_task(db)
    async with db.read() as conn:
        result = await conn.execute(PLAIN_LOAD, {"task_id": ids["task"]})
        assert isinstance(result, Result)
        assert result.one().id == ids["task"]


async def test_a_statement_that_expands_parameters_cannot_be_hot(db: Database) -> None:
    many = hot(select(task.c.id).where(task.c.id.in_(bindparam("ids", expanding=True))))
    async with db.read() as conn:
        with pytest.raises(ValueError, match="expand"):
            await conn.execute(many, {"ids": [new_id()]})


# What asyncpg raises depends on when it learns that the server closed the connection.
CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


@pytest.mark.postgres_only
async def test_a_connection_lost_under_a_hot_statement_is_not_handed_out_again(
    database_url: str,
) -> None:
    db = Database(Settings(database_url=database_url, db_pool_size=1))  # one connection
    try:
        ids = await seed_running_task(db)
        async with db.read() as conn:
            backend = await conn.scalar(text("SELECT pg_backend_pid()"))
        await terminate_backend(database_url, backend)
        with pytest.raises(DatabaseUnavailable) as lost:  # answered 503 database-unavailable
            async with db.read() as conn:
                await conn.execute(LOAD, {"task_id": ids["task"]})
        assert isinstance(lost.value.__cause__, CONNECTION_LOST), repr(lost.value.__cause__)
        async with db.read() as conn:  # the pool replaced the dead connection
            assert (await conn.execute(LOAD, {"task_id": ids["task"]})).first().id == ids["task"]
            assert await conn.scalar(text("SELECT pg_backend_pid()")) != backend
    finally:
        await db.dispose()


async def terminate_backend(database_url: str, pid: int) -> None:
    admin = await asyncpg.connect(_asyncpg_dsn(database_url))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
