"""Bulk actions on a room's tasks (``POST /rooms/{id}/tasks/bulk``): cancel or re-run the
tasks listed by id or matched by a ``TaskFilter``, each exactly as its single request
would (``transitions.update_task`` for a cancel, ``rerun.rerun_task``): authorised and
guarded one by one, a refusal counted rather than fatal.

At most ``MAX_BULK_TASKS`` tasks per call (a filter matching more is refused whole, so a
call never stops part-way for its size), worked through ``CHUNK`` at a time: every task's
write is its own short statement, and each chunk's events go out once it is done."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from uuid import UUID

from taskhub.rules.errors import DomainError, TaskNotFound, TooManyTasks
from taskhub.rules.events import EventBatch
from taskhub.rules.naming import validate_room_id
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy
from taskhub.rules.states import TaskStatus
from taskhub.rules.task_filter import TaskFilter
from taskhub.services import rerun, submit, transitions
from taskhub.services.jobs import KnownJobs
from taskhub.services.user_limits import LimitSettings
from taskhub.store import task_search as store
from taskhub.store.database import Database

MAX_BULK_TASKS = 10_000
CHUNK = 200
MAX_REFUSALS_LISTED = 100

# After each chunk: its events (published by the caller) and the tasks it created.
ChunkDone = Callable[[EventBatch, list[TaskRecord]], Awaitable[None]]


class BulkAction(StrEnum):
    CANCEL = "cancel"
    RERUN = "rerun"


@dataclass
class BulkOutcome:
    matched: int = 0
    succeeded: int = 0
    refused: int = 0
    refusals: list[dict[str, object]] = field(default_factory=list)
    """The first ``MAX_REFUSALS_LISTED``: ``{task_id, status, type}``."""
    created: list[UUID] = field(default_factory=list)

    def refuse(self, task_id: UUID, error: DomainError) -> None:
        self.refused += 1
        if len(self.refusals) < MAX_REFUSALS_LISTED:
            self.refusals.append(
                {"task_id": task_id, "status": error.status, "type": f"/v1/problems/{error.slug}"}
            )


@dataclass(frozen=True)
class BulkContext:
    """What the single requests need: the hub's executors, job cache and retry policy, and
    the per-user limits a re-run is held to (``submit.submit_task``'s ``limits``)."""

    internal: submit.InternalExecutors
    known_jobs: KnownJobs | None = None
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY
    limits: LimitSettings | None = None


async def bulk_action(
    db: Database,
    principal: Principal,
    room_id: str,
    action: BulkAction,
    *,
    ids: list[UUID] | None = None,
    found: TaskFilter | None = None,
    dry_run: bool = False,
    context: BulkContext,
    chunk_done: ChunkDone,
) -> BulkOutcome:
    """Apply ``action`` to the tasks ``ids`` names (distinct; those not of the room are
    refused as 404) or ``found`` matches (``TooManyTasks`` past ``MAX_BULK_TASKS``, nothing
    changed). ``dry_run``: only count them (and refuse the ids not of the room)."""
    validate_room_id(room_id)
    outcome = BulkOutcome()
    async with db.read() as conn:
        if found is not None:
            matched = await store.count_matching(conn, room_id, found)
            if matched > MAX_BULK_TASKS:
                raise TooManyTasks(
                    f"The filter matches {matched} tasks; a bulk action takes at most "
                    f"{MAX_BULK_TASKS}: narrow the filter.",
                    errors=[{"loc": ["body", "filter"], "msg": f"matches {matched} tasks"}],
                )
            targets = [] if dry_run else await store.matching_ids(conn, room_id, found, matched)
        else:
            targets = list(dict.fromkeys(ids or []))
            matched = len(targets)
            in_room: set[UUID] = set()
            for start in range(0, len(targets), CHUNK):
                in_room |= await store.tasks_in_room(conn, room_id, targets[start : start + CHUNK])
            for task_id in targets:
                if task_id not in in_room:
                    outcome.refuse(task_id, TaskNotFound(f"Task {task_id} not in the room."))
            targets = [task_id for task_id in targets if task_id in in_room]
    outcome.matched = matched
    if dry_run:
        return outcome
    for start in range(0, len(targets), CHUNK):
        events = EventBatch()
        created: list[TaskRecord] = []
        for task_id in targets[start : start + CHUNK]:
            try:
                if action == BulkAction.CANCEL:
                    _record, done = await transitions.update_task(
                        db,
                        principal,
                        task_id,
                        status=TaskStatus.CANCELLED,
                        retry_policy=context.retry_policy,
                    )
                else:
                    record, done = await rerun.rerun_task(
                        db,
                        principal,
                        task_id,
                        context.internal,
                        context.known_jobs,
                        limits=context.limits,
                    )
                    created.append(record)
                    outcome.created.append(record.id)
            except DomainError as error:
                outcome.refuse(task_id, error)
                continue
            outcome.succeeded += 1
            events.extend(done)
        await chunk_done(events, created)
    return outcome
