"""Built-in ``@internal`` jobs, useful in any shared room.

- ``@internal:analysis:RoomSummary``: what happened in this room — tasks by status and by
  job, run times, the latest failures.
- ``@internal:analysis:ValidatePayload``: check a payload against a job's JSON schema before
  submitting it (the errors a submit would answer with, without creating a task).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field
from sqlalchemy import func, select

from app.dispatch.definitions import InternalContext, InternalJob
from app.domain.payloads import payload_errors
from app.domain.services.jobs import find_visible_job
from app.domain.states import TaskStatus
from app.persistence.models import job_table, task_table


class RoomSummary(InternalJob):
    """Summarise the room's tasks."""

    category: ClassVar[str] = "analysis"
    failures: int = Field(default=5, ge=0, le=50, description="latest failures to list")

    async def run(self, ctx: InternalContext) -> dict[str, Any]:
        task, job = task_table, job_table
        async with ctx.db.read() as conn:
            by_status = dict(
                (
                    await conn.execute(
                        select(task.c.status, func.count())
                        .where(task.c.room_id == ctx.room_id)
                        .group_by(task.c.status)
                    )
                ).all()
            )
            by_job = (
                await conn.execute(
                    select(job.c.room_id, job.c.category, job.c.name, func.count())
                    .join(task, task.c.job_id == job.c.id)
                    .where(task.c.room_id == ctx.room_id)
                    .group_by(job.c.room_id, job.c.category, job.c.name)
                )
            ).all()
            finished = (
                await conn.execute(
                    select(task.c.started_at, task.c.completed_at).where(
                        task.c.room_id == ctx.room_id,
                        task.c.status == TaskStatus.COMPLETED.value,
                        task.c.started_at.is_not(None),
                    )
                )
            ).all()
            failures = (
                await conn.execute(
                    select(task.c.id, task.c.error, task.c.completed_at)
                    .where(task.c.room_id == ctx.room_id, task.c.status == "failed")
                    .order_by(task.c.completed_at.desc())
                    .limit(self.failures)
                )
            ).all()
        durations = sorted((end - start).total_seconds() for start, end in finished)
        return {
            "room_id": ctx.room_id,
            "total": sum(by_status.values()),
            "by_status": {status.value: by_status.get(status.value, 0) for status in TaskStatus},
            "by_job": {f"{r}:{c}:{n}": count for r, c, n, count in by_job},
            "run_seconds": {
                "count": len(durations),
                "mean": sum(durations) / len(durations) if durations else None,
                "max": durations[-1] if durations else None,
            },
            "latest_failures": [
                {"id": str(row.id), "error": row.error, "at": row.completed_at.isoformat()}
                for row in failures
            ],
        }


class ValidatePayload(InternalJob):
    """Check ``payload`` against the JSON schema of ``job`` (a job visible from the room)."""

    category: ClassVar[str] = "analysis"
    job: str = Field(description="full name of the job, e.g. @global:modifiers:Rotate")
    payload: dict[str, Any] = Field(default_factory=dict)

    async def run(self, ctx: InternalContext) -> dict[str, Any]:
        async with ctx.db.read() as conn:
            row = await find_visible_job(conn, ctx.room_id, self.job)
        # The hub's own validation (RE2 patterns, a budget): the job's schema is any user's.
        errors = payload_errors((row.id, row.updated_at), row.schema, self.payload)
        return {"job": self.job, "valid": not errors, "errors": errors}


JOBS: list[type[InternalJob]] = [RoomSummary, ValidatePayload]
