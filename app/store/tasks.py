"""The statements of submitting a task: the guarded insert and the idempotent replays.

Every function takes the connection a ``Database`` context hands out and works out the
engine from it: the services never ask which one runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import bindparam, select

from taskhub.rules.records import TaskRecord
from taskhub.rules.user_limits import SubmitQuota
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.inserts import insert_task_of_live_job
from taskhub.store.queue_positions import position_before_insert, position_params, queue_position
from taskhub.store.tables import job_table, task_table
from taskhub.store.task_rows import SELECT_TASKS, with_position
from taskhub.store.user_usage import quota_params

task = task_table


@dataclass(frozen=True, slots=True)
class Submitted:
    """A task submitted with an idempotency key, and the digest of the request that
    submitted it (None: submitted before the digest was kept)."""

    task: TaskRecord
    request_digest: str | None


async def _submitted(conn: Connection, row: Any) -> Submitted:
    return Submitted(await with_position(conn, row), row.request_digest)


async def insert_task(
    conn: Connection,
    record: TaskRecord,
    *,
    job_version: datetime,
    idempotency_key: str | None,
    request_digest: str | None,
    max_attempts: int | None,
    now: datetime,
    share_key: str | None = None,
    quota: SubmitQuota | None = None,
) -> bool:
    """Insert ``record`` if its job is still live and at ``job_version``; fill in what the
    database decided (``max_attempts``: None takes the job's; ``queue_position``).
    ``request_digest`` is kept with ``idempotency_key`` (see ``Submitted``). False
    when the job changed or went, or the idempotency key is taken, or (with ``quota``) the
    submitter is at one of its bounds. ``share_key``: a fair job's task's share
    (``rules.fair_share``), its turn already in ``record.turn_at``. PostgreSQL reads the
    position in the same statement; SQLite (in-process, no round trip) right after."""
    params = {
        "b_key": idempotency_key,
        "b_digest": request_digest,
        "b_id": record.id,
        "b_job_id": record.job_id,
        "b_job_version": job_version,
        "b_room_id": record.room_id,
        "b_payload": record.payload,
        "b_created_at": record.created_at,
        "b_submitted_by": record.submitted_by,
        "b_attempt": record.attempt,
        "b_priority": record.priority,
        "b_max_attempts": max_attempts,
        "b_run_at": record.run_at,
        "b_waiting": record.run_at is not None,  # only a run_at ahead is kept
        "b_rerun_of": record.rerun_of,
        "b_turn_at": record.turn,
        "b_share_key": share_key,
        "b_share_backlogged": record.share_backlogged,
    }
    dialect = conn.dialect.name
    postgres = dialect == "postgresql"
    guarded = quota is not None
    if quota is not None:
        params |= quota_params(record.submitted_by, quota)
    if postgres:
        position = position_before_insert(record, now)
        statement = insert_task_of_live_job(dialect, position, within_quota=guarded)
        params |= position_params(record, now)
    else:
        statement = insert_task_of_live_job(dialect, within_quota=guarded)
    row = (await conn.execute(statement, params)).first()
    if row is None:
        return False
    record.max_attempts = row.max_attempts
    if postgres:
        record.queue_position = int(row.queue_position)
    else:
        record.queue_position = await queue_position(conn, record, now, newest=True)
    return True


IDEMPOTENT_REPLAY = hot(
    SELECT_TASKS.where(
        task.c.submitted_by == bindparam("b_user"),
        task.c.job_id == bindparam("b_job"),
        task.c.idempotency_key == bindparam("b_key"),
    )
)


async def submitted_before(
    conn: Connection, submitter: UUID, job_id: UUID, key: str
) -> Submitted | None:
    """The task ``submitter`` submitted to the job with idempotency ``key``, if any."""
    params = {"b_user": submitter, "b_job": job_id, "b_key": key}
    row = (await conn.execute(IDEMPOTENT_REPLAY, params)).first()
    return None if row is None else await _submitted(conn, row)


async def submitted_to_name_before(
    conn: Connection, submitter: UUID, room_id: str, category: str, name: str, key: str
) -> Submitted | None:
    """``submitted_before`` by the job's name parts, soft-deleted jobs included."""
    named = select(job_table.c.id).where(
        job_table.c.room_id == room_id,
        job_table.c.category == category,
        job_table.c.name == name,
    )
    statement = SELECT_TASKS.where(
        task.c.submitted_by == submitter,
        task.c.job_id.in_(named),
        task.c.idempotency_key == key,
    )
    row = (await conn.execute(statement)).first()
    return None if row is None else await _submitted(conn, row)
