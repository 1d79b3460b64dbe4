"""A task update (a transition, or a progress report while running) as ``PATCH
/tasks/{id}`` and the Socket.IO event ``task_update`` both take it (docs/protocol.md): the
write, then, for a terminal one asking ``claim_next``, the claim of the worker's next
task(s); the events are published after both. Answered with the task as it is now, and
``next`` when asked."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from taskhub.clock import utcnow
from taskhub.observability import metrics
from taskhub.rules.authorisation import RoomAction
from taskhub.rules.events import EventBatch
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.runtime import Hub
from taskhub.services import claim, transitions
from taskhub.transport.http.problems import problem_body
from taskhub.transport.http.schemas import (
    ClaimNextIn,
    TaskUpdateIn,
    claimed_task_body,
    task_body,
)


async def apply_task_update(
    hub: Hub, principal: Principal, task_id: UUID, body: TaskUpdateIn
) -> dict[str, Any]:
    maintains_room = await hub.rooms.check_update(
        hub.db, principal, task_id, cancel=body.status == TaskStatus.CANCELLED
    )
    record, events = await transitions.update_task(
        hub.db,
        principal,
        task_id,
        status=body.status,
        error=body.error,
        claim_token=body.claim_token,
        result=body.result,
        progress=body.progress,
        progress_message=body.progress_message,
        lease_seconds=hub.settings.task_lease_seconds,
        retry=body.retry,
        retry_policy=hub.settings.retry_policy,
        maintains_room=maintains_room,
    )
    reply = task_body(record)
    if body.claim_next is not None and hub.settings.worker_shortcuts:
        reply |= await _claim_next(hub, principal, body.claim_next, events)
    await hub.publisher.publish(events)
    return reply


async def _claim_next(
    hub: Hub, principal: Principal, ask: ClaimNextIn, events: EventBatch
) -> dict[str, Any]:
    """The claim a terminal update asked for, after its write (``claim.claim_next``); a
    refusal is answered in ``next_problem`` beside the written task."""
    with metrics.claim_latency() as outcome:
        records, claimed, refused = await claim.claim_next(
            hub.db,
            principal,
            ask.worker_id,
            ask.max_tasks,
            closed=await hub.rooms.closed_to(principal, RoomAction.WORK),
            lease_seconds=hub.settings.task_lease_seconds,
            start=ask.start,
        )
        outcome.value = "claimed" if records else "empty"
    metrics.task_waits(records, utcnow())
    if refused is not None:
        problem = problem_body(refused.status, refused.slug, refused.title, refused.detail)
        return {"next": [], "next_problem": problem}
    events.extend(claimed)
    metrics.worker_shortcut("claim_next", len(records))
    reply: dict[str, Any] = {"next": [claimed_task_body(record) for record in records]}
    if ask.start:
        reply["next_started"] = True
    return reply
