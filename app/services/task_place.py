"""Where a pending task stands, and why it waits: its place in its job's queue, the job's
claim order, and the running limit that holds it back, if one does (the room page's
detail)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from taskhub.rules.fair_share import ClaimOrder
from taskhub.rules.running_limits import HeldBack, RunningLimits, held_back
from taskhub.rules.states import TaskStatus
from taskhub.services.task_reads import get_task
from taskhub.store import jobs as job_store
from taskhub.store.database import Database
from taskhub.store.running_limits import running_in_shares


@dataclass(frozen=True, slots=True)
class TaskPlace:
    status: TaskStatus
    queue_position: int | None
    claim_order: ClaimOrder
    limits: RunningLimits
    held_back: HeldBack | None


async def task_place(db: Database, task_id: UUID) -> TaskPlace:
    """``TaskNotFound`` if there is no such task. Only a pending task has a place and may
    be held back; the counts are read when its job has a limit."""
    record = await get_task(db, task_id)
    async with db.read() as conn:
        policy = await job_store.job_policy(conn, record.job_id)
        assert policy is not None  # a task's job is never deleted, only marked so
        limits = RunningLimits(policy.max_running_per_submitter, policy.max_running_per_room)
        reason = None
        if record.status == TaskStatus.PENDING and limits.any:
            running = await running_in_shares(
                conn, record.job_id, record.submitted_by, record.room_id
            )
            reason = held_back(limits, *running)
    return TaskPlace(
        record.status, record.queue_position, ClaimOrder(policy.claim_order), limits, reason
    )
