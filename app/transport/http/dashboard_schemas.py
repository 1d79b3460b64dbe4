"""Wire models of the room dashboard's endpoints (docs/protocol.md, "Room dashboard"):
the room listing's filters, a room's aggregates, and bulk actions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from taskhub.rules.errors import ValidationFailed
from taskhub.rules.fair_share import ClaimOrder
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.rules.task_filter import (
    DEFAULT_SORT,
    MAX_QUERY_CHARS,
    Sort,
    TaskFilter,
    parse_job,
    parse_query_text,
    parse_statuses,
)
from taskhub.services.bulk import MAX_BULK_TASKS
from taskhub.services.room_stats import RoomStats
from taskhub.services.task_place import TaskPlace
from taskhub.task_wire import summary_body as summary_body
from taskhub.transport.http.schemas import PageQuery


class FilterFields(BaseModel):
    """A ``TaskFilter`` as sent: ``status`` one status or several separated by commas,
    ``job`` a full name, ``submitted_by`` a user id or ``me``, ``worker_id``, ``q`` (1 to
    200 characters, matched literally, case-insensitively, in the error and payload)."""

    model_config = ConfigDict(extra="forbid")

    status: str | None = None
    job: str | None = None
    submitted_by: str | None = None
    worker_id: UUID | None = None
    q: str | None = Field(default=None, min_length=1, max_length=MAX_QUERY_CHARS)

    def task_filter(self, principal: Principal, where: str) -> TaskFilter:
        return TaskFilter(
            statuses=parse_statuses(self.status, [where, "status"]),
            job=parse_job(self.job, [where, "job"]),
            submitted_by=_user_id(self.submitted_by, principal, [where, "submitted_by"]),
            worker_id=self.worker_id,
            q=parse_query_text(self.q, [where, "q"]),
        )


def _user_id(value: str | None, principal: Principal, where: list[str]) -> UUID | None:
    if value is None:
        return None
    if value == "me":
        return principal.id
    try:
        return UUID(value)
    except ValueError:
        raise ValidationFailed(
            "submitted_by must be a user id or 'me'.",
            errors=[{"loc": where, "msg": "not a UUID or 'me'"}],
        ) from None


class RoomTaskQuery(PageQuery, FilterFields):
    """The room listing's query: paging, the filter, ``sort``, and ``view=summary`` (items
    without ``payload`` and ``result``, with ``submitter``). Unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")

    sort: Sort = DEFAULT_SORT
    view: Literal["full", "summary"] = "full"


class StatsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window: Literal["15m", "1h", "24h"] = "1h"
    since: datetime | None = None


class JobCountsOut(BaseModel):
    job: str
    pending: int
    claimed: int
    running: int
    completed: int
    failed: int
    cancelled: int


class StatsBucketOut(BaseModel):
    start: datetime
    completed: int
    failed: int
    cancelled: int
    queue_depth: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None


class RoomStatsOut(BaseModel):
    room_id: str
    window: str
    bucket_seconds: int
    since: datetime
    until: datetime
    counts: list[JobCountsOut]
    buckets: list[StatsBucketOut]


def stats_body(stats: RoomStats) -> dict[str, Any]:
    """``RoomStatsOut`` as a dict for ``json_response``."""
    return {
        "room_id": stats.room_id,
        "window": stats.window,
        "bucket_seconds": stats.bucket_seconds,
        "since": stats.since,
        "until": stats.until,
        "counts": stats.counts,
        "buckets": [
            {
                "start": bucket.start,
                "completed": bucket.completed,
                "failed": bucket.failed,
                "cancelled": bucket.cancelled,
                "queue_depth": bucket.queue_depth,
                "wait_p50": bucket.wait_p50,
                "wait_p95": bucket.wait_p95,
                "run_p50": bucket.run_p50,
                "run_p95": bucket.run_p95,
            }
            for bucket in stats.buckets
        ],
    }


class BulkIn(BaseModel):
    """``ids`` or ``filter``, exactly one; ``dry_run``: only count."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["cancel", "rerun"]
    ids: list[UUID] | None = Field(default=None, max_length=MAX_BULK_TASKS)
    filter: FilterFields | None = None
    dry_run: bool = False

    @model_validator(mode="after")
    def _one_selection(self) -> BulkIn:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("send ids or filter, exactly one of them")
        return self


class HeldBackOut(BaseModel):
    scope: Literal["submitter", "room"]
    running: int
    limit: int


class TaskPlaceOut(BaseModel):
    """Where a task stands in its job's queue and why it waits (``held_back``: the running
    limit its submitter or room reached; null when none holds it)."""

    status: TaskStatus
    queue_position: int | None
    claim_order: ClaimOrder
    max_running_per_submitter: int | None
    max_running_per_room: int | None
    held_back: HeldBackOut | None

    @classmethod
    def of(cls, place: TaskPlace) -> TaskPlaceOut:
        held = place.held_back
        return cls(
            status=place.status,
            queue_position=place.queue_position,
            claim_order=place.claim_order,
            max_running_per_submitter=place.limits.per_submitter,
            max_running_per_room=place.limits.per_room,
            held_back=None
            if held is None
            else HeldBackOut(scope=held.scope, running=held.running, limit=held.limit),
        )


class BulkRefusalOut(BaseModel):
    task_id: UUID
    status: int
    type: str


class BulkOut(BaseModel):
    matched: int
    succeeded: int
    refused: int
    refusals: list[BulkRefusalOut]
    created: list[UUID]
