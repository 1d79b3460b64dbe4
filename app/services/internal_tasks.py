"""State changes of ``@internal`` tasks. The task row is the source of truth: every write
is guarded by ``(id, attempt, expected status)``, so running the same ``(task_id,
attempt)`` twice has no second effect and a task cancelled meanwhile stays cancelled."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from taskhub.clock import utcnow
from taskhub.rules.events import EventBatch, JobsInvalidate, TaskStatusChanged
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.services.jobs import JobNames
from taskhub.store import internal_tasks as store
from taskhub.store.database import Database
from taskhub.store.task_rows import task_record

DISPATCH_FAILED = "Failed to dispatch to internal executor"
INTERNAL_TIMEOUT = "Internal worker timeout"


async def _write(
    db: Database,
    task_id: UUID,
    allowed: tuple[TaskStatus, ...],
    values: dict[str, Any],
    *,
    attempt: int | None = None,
    claim_token: UUID | None = None,
) -> tuple[TaskRecord | None, EventBatch]:
    """Move the task from one of the ``allowed`` statuses as ``values`` say (of ``attempt``,
    under ``claim_token``, when given). The status it had is read row-locked in the same
    transaction (SQLite: the one writer), so the event can say where the task came from."""
    async with db.write() as conn:
        current = await store.locked_status(conn, task_id)
        if current is None or TaskStatus(current) not in allowed:
            return None, EventBatch()
        previous = TaskStatus(current)
        row = await store.update_from(
            conn, task_id, previous.value, values, attempt=attempt, claim_token=claim_token
        )
        if row is None:
            return None, EventBatch()
        record = task_record(row, await JobNames.one(conn, row.job_id))
    events = EventBatch()
    events.add(TaskStatusChanged(record, previous))
    return record, events


async def mark_dispatched(
    db: Database, task_id: UUID, *, run_at: datetime | None = None
) -> tuple[TaskRecord | None, EventBatch]:
    """PENDING → CLAIMED once the broker took the message (the executor may be faster:
    then the task is already RUNNING or done and this changes nothing). ``run_at``: when
    it was dispatched late, from when the internal timeout counts (the sweeper's)."""
    values: dict[str, Any] = {"status": TaskStatus.CLAIMED.value, "claim_token": uuid4()}
    if run_at is not None:
        values["run_at"] = run_at
    return await _write(db, task_id, (TaskStatus.PENDING,), values)


async def undispatched(
    db: Database, before: datetime, *, among: list[UUID] | None = None, limit: int = 500
) -> list[TaskRecord]:
    """Pending ``@internal`` tasks due since before ``before`` (of ``among`` only, when
    given): submitted (or, if delayed, due) then and still not handed to the broker — a
    delayed one that just came due, or one whose submit's process died between its commit
    and the enqueue, or that came due while no hub ran."""
    async with db.read() as conn:
        rows = await store.undispatched_rows(conn, before, among, limit)
        names = await JobNames.resolve(conn, {row.job_id for row in rows})
    return [task_record(row, names[row.job_id]) for row in rows]


async def mark_dispatch_failed(db: Database, task_id: UUID) -> tuple[TaskRecord | None, EventBatch]:
    return await _write(
        db,
        task_id,
        (TaskStatus.PENDING,),
        {
            "status": TaskStatus.FAILED.value,
            "error": DISPATCH_FAILED,
            "completed_at": utcnow(),
        },
    )


async def start(
    db: Database, task_id: UUID, attempt: int, run: UUID
) -> tuple[TaskRecord | None, EventBatch]:
    """→ RUNNING, only from CLAIMED (or, when the executor beat the dispatcher's mark,
    PENDING) of this very attempt; the task's claim token becomes ``run``, the executor's
    own, which its ``finish`` must carry."""
    return await _write(
        db,
        task_id,
        (TaskStatus.CLAIMED, TaskStatus.PENDING),
        {"status": TaskStatus.RUNNING.value, "started_at": utcnow(), "claim_token": run},
        attempt=attempt,
    )


async def finish(
    db: Database,
    task_id: UUID,
    attempt: int,
    run: UUID,
    *,
    result: Any = None,
    error: str | None = None,
) -> tuple[TaskRecord | None, EventBatch]:
    """RUNNING → COMPLETED (with ``result``) or FAILED (with ``error``), for the run that
    started it."""
    values: dict[str, Any] = {"completed_at": utcnow()}
    if error is None:
        values.update(status=TaskStatus.COMPLETED.value, result=result)
    else:
        values.update(status=TaskStatus.FAILED.value, error=error)
    return await _write(
        db, task_id, (TaskStatus.RUNNING,), values, attempt=attempt, claim_token=run
    )


async def written_by(
    db: Database, task_id: UUID, run: UUID, statuses: tuple[TaskStatus, ...]
) -> TaskRecord | None:
    """The task if it is in one of ``statuses`` under ``run``'s token: a write of that run
    that committed although its answer was lost with the connection."""
    async with db.read() as conn:
        row = await store.task_under_token(conn, task_id, run)
        if row is None or TaskStatus(row.status) not in statuses:
            return None
        return task_record(row, await JobNames.one(conn, row.job_id))


async def ensure_internal_jobs(
    db: Database, schemas: dict[str, dict[str, Any]], costly_jobs: Collection[str] = ()
) -> EventBatch:
    """Create, revive, or refresh the schema of the ``@internal`` job rows at start-up.
    ``schemas`` maps ``category:name`` to its JSON schema; the jobs named in ``costly_jobs``
    (``InternalJob.costly``) are marked so (``job.costly``), the others not."""
    events = EventBatch()
    async with db.write() as conn:
        for key, schema in schemas.items():
            category, name = key.split(":", 1)
            changed = await store.ensure_internal_job(
                conn, category, name, schema, utcnow(), costly=key in costly_jobs
            )
            if changed:
                events.add(JobsInvalidate(INTERNAL_ROOM))
    return events
