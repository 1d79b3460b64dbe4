"""``/v1/joblib/tasks/{task_id}/logs``: a worker appends its run's log lines; anyone
reads them, oldest first, page by page."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, Field
from starlette.responses import Response

from taskhub.rules.authorisation import RoomAction
from taskhub.rules.log_limits import MAX_LINES_PER_POST
from taskhub.services import task_logs as service
from taskhub.transport.http.api import Api, ApiRequest, json_response

api = Api()
Level = Literal["debug", "info", "warning", "error", "critical"]


class LogLineIn(BaseModel):
    at: AwareDatetime
    level: Level
    logger: str | None = None
    # Cut (marked) beyond the hub's bound rather than refused: a log line is never worth
    # failing a batch for.
    message: str


class TaskLogsIn(BaseModel):
    claim_token: UUID
    lines: list[LogLineIn] = Field(min_length=1, max_length=MAX_LINES_PER_POST)
    # Lines the worker dropped just before these (its own bounds).
    dropped: int = Field(default=0, ge=0)


class TaskLogsAcceptedOut(BaseModel):
    accepted: int
    dropped: int


class TaskLogLineOut(BaseModel):
    id: int
    attempt: int
    at: datetime
    level: str
    logger: str | None
    message: str
    dropped: int


class TaskLogsOut(BaseModel):
    items: list[TaskLogLineOut]
    next: int | None


class TaskLogsQuery(BaseModel):
    after: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)


@api.route(
    "POST",
    "/tasks/{task_id}/logs",
    status=202,
    body=TaskLogsIn,
    response=TaskLogsAcceptedOut,
    errors=(403, 404, 409, 413, 422),
)
async def append_task_logs(req: ApiRequest) -> Response:
    """Append log lines of the task's current run (the claim token's)."""
    task_id = req.uuid("task_id")
    body = await req.body(TaskLogsIn)
    lines = [service.LogLine(line.at, line.level, line.logger, line.message) for line in body.lines]
    appended, events = await service.append_lines(
        req.hub.db,
        req.principal,
        task_id,
        claim_token=body.claim_token,
        lines=lines,
        dropped=body.dropped,
        rates=req.hub.log_rates,
    )
    await req.hub.publisher.publish(events)
    return json_response({"accepted": appended.accepted, "dropped": appended.dropped}, 202)


@api.route(
    "GET",
    "/tasks/{task_id}/logs",
    query=TaskLogsQuery,
    response=TaskLogsOut,
    errors=(404, 422),
)
async def read_task_logs(req: ApiRequest) -> Response:
    """A task's log lines after the line ``after``, oldest first."""
    task_id = req.uuid("task_id")
    query = req.query(TaskLogsQuery)
    await req.check_task_room(task_id, RoomAction.READ)
    items = await service.read_lines(req.hub.db, task_id, after=query.after, limit=query.limit)
    return json_response({"items": items, "next": items[-1]["id"] if items else None})
