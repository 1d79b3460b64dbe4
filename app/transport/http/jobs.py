"""``/v1/joblib/rooms/{room_id}/jobs`` and the room's worker list."""

from __future__ import annotations

from starlette.responses import Response

from taskhub.rules.authorisation import RoomAction
from taskhub.services import jobs as service
from taskhub.services import rooms as room_service
from taskhub.services import workers as worker_service
from taskhub.transport.http.api import Api, ApiRequest, json_response
from taskhub.transport.http.schemas import (
    JobOut,
    JobRegisterIn,
    JobSummaryOut,
    PageOut,
    PageQuery,
    RoomWorkerOut,
    page_of,
)

api = Api()


@api.route(
    "PUT",
    "/rooms/{room_id:room}/jobs",
    status=201,
    body=JobRegisterIn,
    response=JobOut,
    errors=(400, 403, 404, 409, 422),
    room=RoomAction.WORK,
)
async def register_job(req: ApiRequest) -> Response:
    """Register a job in a room (201 new or revived, 200 identical re-registration)."""
    body = await req.body(JobRegisterIn)
    room_id = req.path("room_id")
    if not await service.is_live(req.hub.db, room_id, body.category, body.name):
        # A worker joins a live job with ``work``; a new (or revived) job is ``register``.
        await req.check_room(room_id, RoomAction.REGISTER)
    registration, events = await service.register_job(
        req.hub.db,
        req.principal,
        req.path("room_id"),
        category=body.category,
        name=body.name,
        schema=body.schema_,
        worker_id=body.worker_id,
        allowed_categories=req.hub.settings.allowed_categories,
        max_attempts=body.max_attempts,
        claim_order=body.claim_order,
        max_running_per_submitter=body.max_running_per_submitter,
        max_running_per_room=body.max_running_per_room,
    )
    await req.hub.publisher.publish(events)
    return json_response(
        JobOut.of(registration.job, registration.worker_id),
        201 if registration.created else 200,
    )


@api.route(
    "GET",
    "/rooms/{room_id:room}/jobs",
    query=PageQuery,
    response=PageOut[JobSummaryOut],
    errors=(400,),
    room=RoomAction.READ,
)
async def list_jobs(req: ApiRequest) -> Response:
    """The room's live jobs plus @global and @internal ones."""
    page = req.query(PageQuery)
    result = await service.list_jobs(req.hub.db, req.path("room_id"), page.limit, page.offset)
    return json_response(page_of(JobSummaryOut, result))


@api.route(
    "GET",
    "/rooms/{room_id:room}/jobs/{full_name:path}",
    response=JobOut,
    errors=(400, 404),
    room=RoomAction.READ,
)
async def get_job(req: ApiRequest) -> Response:
    """One job, by full name, as seen from the room."""
    record = await service.get_job(req.hub.db, req.path("room_id"), req.path("full_name"))
    return json_response(JobOut.of(record))


@api.route(
    "GET",
    "/rooms/{room_id:room}/workers",
    query=PageQuery,
    response=PageOut[RoomWorkerOut],
    errors=(400,),
    room=RoomAction.READ,
)
async def list_room_workers(req: ApiRequest) -> Response:
    """Workers serving jobs visible from the room, with their owners, those jobs, slots and
    claimed/running tasks."""
    page = req.query(PageQuery)
    result = await worker_service.list_room_workers(
        req.hub.db, req.path("room_id"), page.limit, page.offset
    )
    items = [RoomWorkerOut.of_room(record) for record in result.items]
    # A worker's tasks are listed from any room: not those of private rooms hidden here.
    closed = await req.hub.rooms.closed_to(req.principal, RoomAction.READ)
    await room_service.hide_closed_tasks(req.hub.db, [item.running for item in items], closed)
    return json_response(
        PageOut[RoomWorkerOut](
            items=items, total=result.total, limit=result.limit, offset=result.offset
        )
    )
