"""The room dashboard's endpoints: a room's aggregates, re-running a task, and bulk
actions on a room's tasks (the filtered room listing is ``tasks.list_room_tasks``; the
room's workers ``jobs.list_room_workers``)."""

from __future__ import annotations

from starlette.responses import Response

from taskhub.rules.authorisation import RoomAction
from taskhub.rules.events import EventBatch
from taskhub.rules.naming import is_internal_job
from taskhub.rules.records import TaskRecord
from taskhub.services import bulk, rerun, task_place
from taskhub.services import room_stats as stats_service
from taskhub.transport.http.api import Api, ApiRequest, json_response
from taskhub.transport.http.dashboard_schemas import (
    BulkIn,
    BulkOut,
    RoomStatsOut,
    StatsQuery,
    TaskPlaceOut,
    stats_body,
)
from taskhub.transport.http.schemas import TaskOut, task_body

api = Api()


@api.route(
    "GET",
    "/rooms/{room_id:room}/stats",
    query=StatsQuery,
    response=RoomStatsOut,
    errors=(400, 422),
    room=RoomAction.READ,
)
async def room_stats(req: ApiRequest) -> Response:
    """The room's task counts per job, and per time bucket of a window: tasks finished,
    wait and run time percentiles, and queue depth."""
    query = req.query(StatsQuery)
    found = await stats_service.room_stats(
        req.hub.db, req.path("room_id"), query.window, query.since
    )
    return json_response(stats_body(found))


@api.route("GET", "/tasks/{task_id}/place", response=TaskPlaceOut, errors=(404, 422))
async def get_task_place(req: ApiRequest) -> Response:
    """Where a task stands in its job's queue, the job's claim order and running limits,
    and the limit that holds it back, if one does."""
    await req.check_task_room(req.uuid("task_id"), RoomAction.READ)
    place = await task_place.task_place(req.hub.db, req.uuid("task_id"))
    return json_response(TaskPlaceOut.of(place))


@api.route(
    "POST",
    "/tasks/{task_id}/rerun",
    status=202,
    response=TaskOut,
    errors=(404, 409, 422, 429, 503),
    headers={"Location": "URL of the new task", "Retry-After": "seconds before polling"},
)
async def rerun_task(req: ApiRequest) -> Response:
    """Submit a new task with the job, room, payload and priority of a failed or cancelled
    one (its ``rerun_of``)."""
    await req.check_task_room(req.uuid("task_id"), RoomAction.SUBMIT, others=RoomAction.MANAGE)
    record, events = await rerun.rerun_task(
        req.hub.db,
        req.principal,
        req.uuid("task_id"),
        req.hub.internal,
        req.hub.known_jobs,
        limits=req.hub.settings,
    )
    record = await _published(req, record, events)
    return json_response(
        task_body(record),
        202,
        headers={"Location": f"/v1/joblib/tasks/{record.id}", "Retry-After": "1"},
    )


async def _published(req: ApiRequest, record: TaskRecord, events: EventBatch) -> TaskRecord:
    """Publish a submit's events, then dispatch an ``@internal`` task due at once, as
    ``tasks.submit_task`` does (the executor's events can only come after "pending")."""
    await req.hub.publisher.publish(events)
    if record.run_at is None and is_internal_job(record.job_name):
        record, dispatched = await req.hub.internal.dispatch(record)
        await req.hub.publisher.publish(dispatched)
    return record


@api.route(
    "POST",
    "/rooms/{room_id:room}/tasks/bulk",
    body=BulkIn,
    response=BulkOut,
    errors=(400, 422),
    room=RoomAction.MANAGE,
)
async def bulk_action(req: ApiRequest) -> Response:
    """Cancel or re-run many of the room's tasks (by ids, or by a filter), each as its own
    request would; ``dry_run`` only counts them."""
    body = await req.body(BulkIn)
    found = None if body.filter is None else body.filter.task_filter(req.principal, "filter")

    async def chunk_done(events: EventBatch, created: list[TaskRecord]) -> None:
        await req.hub.publisher.publish(events)
        for record in created:
            if record.run_at is None and is_internal_job(record.job_name):
                _record, dispatched = await req.hub.internal.dispatch(record)
                await req.hub.publisher.publish(dispatched)

    outcome = await bulk.bulk_action(
        req.hub.db,
        req.principal,
        req.path("room_id"),
        bulk.BulkAction(body.action),
        ids=body.ids,
        found=found,
        dry_run=body.dry_run,
        context=bulk.BulkContext(
            internal=req.hub.internal,
            known_jobs=req.hub.known_jobs,
            retry_policy=req.hub.settings.retry_policy,
            limits=req.hub.settings,
        ),
        chunk_done=chunk_done,
    )
    return json_response(
        {
            "matched": outcome.matched,
            "succeeded": outcome.succeeded,
            "refused": outcome.refused,
            "refusals": outcome.refusals,
            "created": outcome.created,
        }
    )
