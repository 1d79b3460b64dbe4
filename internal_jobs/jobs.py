"""Built-in ``@internal`` jobs, useful in any shared room.

- ``@internal:analysis:RoomSummary``: what happened in this room — tasks by status and by
  job, run times, the latest failures.
- ``@internal:analysis:ValidatePayload``: check a payload against a job's JSON schema before
  submitting it (the errors a submit would answer with, without creating a task).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from taskhub.dispatch.definitions import InternalContext, InternalJob
from taskhub.rules.states import TaskStatus
from taskhub.services.jobs import find_visible_job
from taskhub.store.room_summary import read_room_summary
from taskhub.validation.payload_checks import payload_errors_here


class RoomSummary(InternalJob):
    """Summarise the room's tasks: how many by status and by job, the run times of the
    completed ones (``run_seconds``: count, mean and max of ``completed_at - started_at``,
    over those that have a ``started_at``) and the latest failures.

    Every figure is an aggregate computed by the database: a few statements, each answering
    at most one row per status, per job or per listed failure, whatever the room's history
    holds. (Run times are summed in whole microseconds, exactly; the mean is that sum over
    the count, rounded once to a float.)"""

    category: ClassVar[str] = "analysis"
    failures: int = Field(default=5, ge=0, le=50, description="latest failures to list")

    async def run(self, ctx: InternalContext) -> dict[str, Any]:
        async with ctx.db.read() as conn:
            summary = await read_room_summary(conn, ctx.room_id, self.failures)
        statuses, by_job, failures = summary.statuses, summary.by_job, summary.failures
        by_status = {row.status: row.tasks for row in statuses}
        completed = next(
            (row for row in statuses if row.status == TaskStatus.COMPLETED.value), None
        )
        runs = completed.timed if completed is not None else 0
        total_us = completed.total_us if completed is not None else 0
        max_us = completed.max_us if completed is not None else 0
        return {
            "room_id": ctx.room_id,
            "total": sum(by_status.values()),
            "by_status": {status.value: by_status.get(status.value, 0) for status in TaskStatus},
            "by_job": {f"{r}:{c}:{n}": count for r, c, n, count in by_job},
            "run_seconds": {
                "count": runs,
                # int / int: correctly rounded (a timedelta's total_seconds() is this too)
                "mean": int(total_us) / (1_000_000 * runs) if runs else None,
                "max": int(max_us) / 1_000_000 if runs else None,
            },
            "latest_failures": [
                {"id": str(row.id), "error": row.error, "at": row.completed_at.isoformat()}
                for row in failures
            ],
        }


class ValidatePayload(InternalJob):
    """Check ``payload`` against the JSON schema of ``job`` (a job visible from the room).

    Costly: each unfinished task counts against its submitter's bound of costly validations
    (a submit past it is refused, 503 ``validation-busy``), and a costly payload takes one
    of its submitter's places on the payload thread, waiting for it if the submitter's own
    submits hold them: one user's validations never take more than their share."""

    category: ClassVar[str] = "analysis"
    costly: ClassVar[bool] = True
    job: str = Field(description="full name of the job, e.g. @global:modifiers:Rotate")
    payload: dict[str, Any] = Field(default_factory=dict)

    async def run(self, ctx: InternalContext) -> dict[str, Any]:
        async with ctx.db.read() as conn:
            row = await find_visible_job(conn, ctx.room_id, self.job)
        # The hub's own validation (RE2 patterns, a budget, a costly payload beside the event
        # loop, which the hub's requests may share): the job's schema is any user's.
        errors = await payload_errors_here(
            (row.id, row.updated_at), row.schema, self.payload, ctx.submitted_by
        )
        return {"job": self.job, "valid": not errors, "errors": errors}


JOBS: list[type[InternalJob]] = [RoomSummary, ValidatePayload]
