"""Re-running a task: a new task of the same job, room, payload, priority and attempts as
a ``failed`` or ``cancelled`` one, submitted by the caller through the submit service
(``submit.submit_task``: the same checks, insert and events), recording ``rerun_of``."""

from __future__ import annotations

from uuid import UUID

from taskhub.rules.errors import TaskNotFound, TaskNotRerunnable
from taskhub.rules.events import EventBatch
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.services import submit, task_reads
from taskhub.services.jobs import KnownJobs
from taskhub.services.user_limits import LimitSettings
from taskhub.store.database import Database

RERUNNABLE = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})


async def rerun_task(
    db: Database,
    principal: Principal,
    task_id: UUID,
    internal: submit.InternalExecutors,
    known_jobs: KnownJobs | None = None,
    *,
    room_id: str | None = None,
    limits: LimitSettings | None = None,
) -> tuple[TaskRecord, EventBatch]:
    """Submit a re-run of the task ``task_id`` as ``principal``: ``TaskNotFound`` (also when
    ``room_id`` is given and the task is not of that room), ``TaskNotRerunnable`` unless it
    is failed or cancelled, and whatever a submit of its payload to its job would refuse
    (the job gone: ``JobNotFound``; the payload no longer fitting the job's schema: 422;
    past one of the caller's per-user ``limits``: 429 or 503).
    The caller publishes the events, and dispatches an ``@internal`` task, as for a submit."""
    original = await task_reads.get_task(db, task_id)
    if room_id is not None and original.room_id != room_id:
        raise TaskNotFound(f"Task {task_id} not found in room {room_id!r}.")
    if original.status not in RERUNNABLE:
        raise TaskNotRerunnable(
            f"Task {task_id} is {original.status.value}: only failed or cancelled tasks are re-run."
        )
    record, events, _created = await submit.submit_task(
        db,
        principal,
        original.room_id,
        original.job_name,
        original.payload,
        internal,
        options=submit.SubmitOptions(
            priority=original.priority, max_attempts=original.max_attempts
        ),
        known_jobs=known_jobs,
        rerun_of=original.id,
        limits=limits,
    )
    return record, events
