"""``/v1/joblib/workers``: create, heartbeat, list, delete."""

from __future__ import annotations

from starlette.responses import Response

from taskhub.services import workers as service
from taskhub.transport.http.api import Api, ApiRequest, json_response
from taskhub.transport.http.schemas import (
    HeartbeatIn,
    HeartbeatOut,
    PageOut,
    PageQuery,
    WorkerCreatedOut,
    WorkerCreateIn,
    WorkerSummaryOut,
    page_of,
)

api = Api()


@api.route(
    "POST", "/workers", status=201, body=WorkerCreateIn, response=WorkerCreatedOut, errors=(422,)
)
async def create_worker(req: ApiRequest) -> Response:
    """Create a worker owned by the caller (an optional body may give its ``slots``)."""
    body = await req.optional_body(WorkerCreateIn)
    slots = body.slots if body is not None else None
    record = await service.create_worker(req.hub.db, req.principal, slots)
    timeout = req.hub.settings.worker_timeout_seconds
    return json_response(WorkerCreatedOut.of_timeout(record, timeout), 201)


@api.route("GET", "/workers", query=PageQuery, response=PageOut[WorkerSummaryOut])
async def list_workers(req: ApiRequest) -> Response:
    """List all workers, newest first."""
    page = req.query(PageQuery)
    result = await service.list_workers(req.hub.db, page.limit, page.offset)
    return json_response(page_of(WorkerSummaryOut, result))


@api.route(
    "PATCH",
    "/workers/{worker_id}",
    body=HeartbeatIn,
    response=HeartbeatOut,
    errors=(403, 404, 422),
)
async def heartbeat(req: ApiRequest) -> Response:
    """Heartbeat: record that the worker is alive, extend its task leases, and learn which
    of its tasks were cancelled."""
    worker_id = req.uuid("worker_id")
    body = await req.optional_body(HeartbeatIn)
    record = await service.heartbeat(
        req.hub.db,
        req.principal,
        worker_id,
        cancelled_within=req.hub.settings.worker_timeout_seconds,
        lease_seconds=req.hub.settings.task_lease_seconds,
        running=body.tasks if body is not None else None,
        slots=body.slots if body is not None else None,
    )
    return json_response(HeartbeatOut.of_timeout(record, req.hub.settings.worker_timeout_seconds))


@api.route("DELETE", "/workers/{worker_id}", status=204, errors=(403, 404, 422))
async def delete_worker(req: ApiRequest) -> Response:
    """Remove a worker: its running tasks are retried or fail; orphaned jobs are soft-deleted."""
    events = await service.delete_worker(
        req.hub.db, req.principal, req.uuid("worker_id"), policy=req.hub.settings.retry_policy
    )
    await req.hub.publisher.publish(events)
    return Response(status_code=204)
