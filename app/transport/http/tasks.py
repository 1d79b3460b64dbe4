"""Task endpoints: submit, claim, update, read (with long-poll), list."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from uuid import UUID

from starlette.responses import Response
from starlette.types import Receive

from taskhub.clock import utcnow
from taskhub.observability import metrics
from taskhub.rules.authorisation import RoomAction
from taskhub.rules.errors import TaskNotFound, Unauthorized, ValidationFailed
from taskhub.rules.naming import is_internal_job
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import is_terminal
from taskhub.rules.task_filter import DEFAULT_SORT
from taskhub.services import claim, submit, task_reads
from taskhub.services import task_listing as listings
from taskhub.transport.http.api import Api, ApiRequest, capped_int, json_response
from taskhub.transport.http.dashboard_schemas import RoomTaskQuery, summary_body
from taskhub.transport.http.schemas import (
    PageOut,
    TaskClaimIn,
    TaskClaimOut,
    TaskOut,
    TaskPageQuery,
    TaskSubmitIn,
    TaskUpdateIn,
    TaskUpdateOut,
    claimed_task_body,
    task_body,
    task_listing_response,
)
from taskhub.transport.task_updates import apply_task_update

api = Api()
_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait=(\d+)\b")
# Long-polls wake on events; this slow re-read only covers a wake-up that never arrives.
SAFETY_RECHECK_SECONDS = 5.0


@api.route(
    "POST",
    "/rooms/{room_id:room}/tasks/{full_name:path}",
    status=202,
    body=TaskSubmitIn,
    response=TaskOut,
    errors=(400, 404, 422, 429, 503),
    headers={"Location": "URL of the task", "Retry-After": "seconds before polling"},
    room=RoomAction.SUBMIT,
)
async def submit_task(req: ApiRequest) -> Response:
    """Submit a task of a job visible from the room."""
    body = await req.body(TaskSubmitIn)
    record, events, created = await submit.submit_task(
        req.hub.db,
        req.principal,
        req.path("room_id"),
        req.path("full_name"),
        body.payload,
        req.hub.internal,
        idempotency_key=_idempotency_key(req.header("idempotency-key")),
        options=body.options(utcnow()),
        known_jobs=req.hub.known_jobs,
        limits=req.hub.settings,
    )
    await req.hub.publisher.publish(events)
    if created and record.run_at is None and is_internal_job(record.job_name):
        # Enqueued only once "pending" is out: the executor's events can only come after.
        # (A delayed one is dispatched when it comes due: ``DueTaskAnnouncer``.)
        record, dispatched = await req.hub.internal.dispatch(record)
        await req.hub.publisher.publish(dispatched)
    return json_response(
        task_body(record),
        202 if created else 200,  # 200: a replay of the same Idempotency-Key
        headers={"Location": f"/v1/joblib/tasks/{record.id}", "Retry-After": "1"},
    )


def _idempotency_key(value: str | None) -> str | None:
    """1 to 255 visible ASCII characters, or no header at all."""
    if value is None:
        return None
    if not (0 < len(value) <= 255 and all(33 <= ord(ch) <= 126 for ch in value)):
        raise ValidationFailed(
            "Idempotency-Key must be 1 to 255 visible ASCII characters.",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "invalid idempotency key"}],
        )
    return value


@api.route("POST", "/tasks/claim", body=TaskClaimIn, response=TaskClaimOut, errors=(403, 404, 422))
async def claim_task(req: ApiRequest) -> Response:
    """Claim the oldest pending task(s) of the worker's jobs; a repeated
    ``Idempotency-Key`` answers the tasks its first claim got while they are still claimed."""
    body = await req.body(TaskClaimIn)
    start = body.start and req.hub.settings.worker_shortcuts
    with metrics.claim_latency() as outcome:
        records, events = await claim.claim_tasks(
            req.hub.db,
            req.principal,
            body.worker_id,
            body.max_tasks or 1,
            closed=await req.hub.rooms.closed_to(req.principal, RoomAction.WORK),
            lease_seconds=req.hub.settings.task_lease_seconds,
            request_key=_idempotency_key(req.header("idempotency-key")),
            start=start,
        )
        outcome.value = "claimed" if records else "empty"
    metrics.task_waits(records, utcnow())
    await req.hub.publisher.publish(events)
    claimed = [claimed_task_body(record) for record in records]
    reply: dict[str, Any] = {"task": claimed[0] if claimed else None}
    if body.max_tasks is not None:  # the batch list is an opt-in extension of the protocol
        reply["tasks"] = claimed
    if start:  # so is starting them; the echo tells a worker this hub knows it
        reply["started"] = True
        metrics.worker_shortcut("claim_start", len(records))
    return json_response(reply)


@api.route(
    "GET",
    "/tasks/{task_id}",
    response=TaskOut,
    errors=(404, 422),
    headers={"Preference-Applied": "wait=N when the answer waited (Prefer: wait=N)"},
)
async def get_task(req: ApiRequest) -> Response:
    """Read a task; with ``Prefer: wait=N`` wait until it ends (or N seconds pass)."""
    task_id = req.uuid("task_id")
    wait = _requested_wait(req.header("prefer"), req.hub.settings.long_poll_max_wait_seconds)
    if wait <= 0:
        record = await _read(req, task_id)
        await _check_read(req, record)
        return json_response(task_body(record))
    with req.hub.waiters.watch(task_id) as wake:
        record = await _read(req, task_id)
        await _check_read(req, record)
        if is_terminal(record.status):
            return json_response(task_body(record))
        with metrics.long_poll() as outcome, req.hub.identities.watch(req.identity) as revoked:
            try:
                ended = await _wait_for_end(req, record, wake, wait, revoked)
            except Unauthorized:
                outcome.value = "revoked"
                raise
            outcome.value = _wait_outcome(ended, released=req.hub.waiters.closed)
    if ended is None:  # the client hung up: whatever is sent goes nowhere
        return Response(status_code=499)
    await _check_read(req, ended)  # still a reader (a member may be removed meanwhile)
    return json_response(task_body(ended), headers={"Preference-Applied": f"wait={wait}"})


async def _check_read(req: ApiRequest, record: TaskRecord) -> None:
    """The caller may read the task's room (a private room's task is not found else)."""
    hidden = TaskNotFound(f"Task {record.id} not found.")
    await req.check_room(record.room_id, RoomAction.READ, hidden=hidden)


async def _read(req: ApiRequest, task_id: UUID) -> TaskRecord:
    """The task as an answer writes it: its documents as stored, not decoded."""
    return await task_reads.get_task(req.hub.db, task_id, stored_documents=True)


async def _wait_for_end(
    req: ApiRequest,
    record: TaskRecord,
    wake: asyncio.Event,
    wait: float,
    revoked: asyncio.Event,
) -> TaskRecord | None:
    """Wait holding no database connection; re-read when woken or, rarely, as a fallback.
    A graceful shutdown ends the wait with the task's current state; a client that hung up
    ends it at once (None: nobody is there to answer); the caller's token revoked
    meanwhile (``revoked``: ``Authenticator.watch``), with 401 ``Unauthorized``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    gone = asyncio.ensure_future(_hung_up(req.request.receive))
    unauthorised = asyncio.ensure_future(revoked.wait())
    try:
        while not is_terminal(record.status) and not req.hub.waiters.closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            woken = asyncio.ensure_future(wake.wait())
            await asyncio.wait(
                {woken, gone, unauthorised},
                timeout=min(remaining, SAFETY_RECHECK_SECONDS),
                return_when=asyncio.FIRST_COMPLETED,
            )
            woken.cancel()
            if gone.done():
                return None
            if revoked.is_set():
                raise Unauthorized("Invalid or revoked token.")
            wake.clear()
            record = await _read(req, record.id)
        return record
    finally:
        gone.cancel()
        unauthorised.cancel()


async def _hung_up(receive: Receive) -> None:
    """Returns once the client has disconnected (a GET has no body to read meanwhile)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _wait_outcome(record: TaskRecord | None, *, released: bool) -> str:
    if record is None:
        return "abandoned"
    if is_terminal(record.status):
        return "woken"
    return "shutdown" if released else "timeout"


def _requested_wait(prefer: str | None, cap: int) -> int:
    if not prefer:
        return 0
    match = _PREFER_WAIT.search(prefer)
    if match is None:
        return 0
    return capped_int(match.group(1), cap)


@api.route(
    "PATCH",
    "/tasks/{task_id}",
    body=TaskUpdateIn,
    response=TaskUpdateOut,
    errors=(403, 404, 409, 422),
)
async def update_task(req: ApiRequest) -> Response:
    """Move a task through its state machine; a terminal one with ``claim_next`` then
    claims the worker's next task(s) (answered in ``next``)."""
    task_id = req.uuid("task_id")
    body = await req.body(TaskUpdateIn)
    return json_response(await apply_task_update(req.hub, req.principal, task_id, body))


@api.route(
    "GET",
    "/rooms/{room_id:room}/tasks",
    query=RoomTaskQuery,
    response=PageOut[TaskOut],
    errors=(400, 422),
    room=RoomAction.READ,
)
async def list_room_tasks(req: ApiRequest) -> Response:
    """Tasks submitted into the room, newest first unless ``sort`` says otherwise; narrowed
    by the filter parameters; ``view=summary``: without documents, with submitter names."""
    query = req.query(RoomTaskQuery)
    found = query.task_filter(req.principal, "query")
    summary = query.view == "summary"
    head = req.request.method == "HEAD"
    if found.is_plain and query.sort == DEFAULT_SORT and not summary:  # as before filters
        status = found.statuses[0] if found.statuses else None
        listing = await listings.list_room_tasks(
            req.hub.db, req.path("room_id"), status, query.limit, query.offset
        )
        return task_listing_response(listing, head=head)
    listing = await listings.search_room_tasks(
        req.hub.db,
        req.path("room_id"),
        found,
        sort=query.sort,
        summary=summary,
        limit=query.limit,
        offset=query.offset,
    )
    if listing.submitters is None:
        return task_listing_response(listing, head=head)
    page = listing.page
    items = [summary_body(record, listing.submitters.get(record.id)) for record in page.items]
    return json_response(
        {"items": items, "total": page.total, "limit": page.limit, "offset": page.offset}
    )


@api.route(
    "GET",
    "/rooms/{room_id:room}/jobs/{full_name:path}/tasks",
    query=TaskPageQuery,
    response=PageOut[TaskOut],
    errors=(400, 404, 422),
    room=RoomAction.READ,
)
async def list_job_tasks(req: ApiRequest) -> Response:
    """Tasks of one job submitted into the room, newest first."""
    query = req.query(TaskPageQuery)
    listing = await listings.list_job_tasks(
        req.hub.db,
        req.path("room_id"),
        req.path("full_name"),
        query.status,
        query.limit,
        query.offset,
    )
    return task_listing_response(listing, head=req.request.method == "HEAD")
