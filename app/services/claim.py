"""Claiming tasks for a worker."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID, uuid4

from taskhub.clock import utcnow
from taskhub.rules.authorisation import check_claim
from taskhub.rules.errors import DomainError
from taskhub.rules.events import EventBatch, TaskStatusChanged
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.services.jobs import JobNames
from taskhub.services.ownership import owned_worker
from taskhub.store import claims as store
from taskhub.store.connections import Connection
from taskhub.store.database import Database, is_deadlock, raced_a_running_limit
from taskhub.store.task_rows import task_record

log = logging.getLogger(__name__)
# A claim aborted as one side of a deadlock runs again, this many times in all at most.
CLAIM_ATTEMPTS = 4


async def claim_tasks(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int = 1,
    *,
    closed: frozenset[str],
    lease_seconds: float,
    request_key: str | None = None,
    start: bool = False,
) -> tuple[list[TaskRecord], EventBatch]:
    """Hand the worker up to ``max_tasks`` of the oldest pending tasks of its jobs, each
    with a fresh claim token, in one atomic statement (which also checks ownership).
    ``closed``: the private rooms whose tasks the claim leaves alone (those where the
    caller, the worker's owner, may not work: ``RoomAccess.closed_to``).

    With ``request_key`` (the claim's ``Idempotency-Key``) the tasks keep the key, and the
    tasks this worker still holds as claimed under it are answered again instead of
    claiming more: a worker that repeats a claim whose answer it never got (a connection
    reset after the commit) gets the same tasks, not the next ones while the first wait for
    their lease to run out. Keyed claims of one worker take its row lock first, so one
    repeated while the first is still running waits for it and then answers its tasks.

    With ``start`` the same statement also starts the tasks (a claim-and-start: they come
    back ``running``, saving the worker its ``PATCH running``); each task's event then goes
    from pending straight to running.

    A claim that PostgreSQL aborts as one side of a deadlock changed nothing and runs again
    (two batch claims can take the queue-count rows of two jobs in opposite orders: their
    tasks interleave in time); so does one refused for racing another past a job's running
    limit (``rules.running_limits``), which then counts afresh. If it races every time, it
    answers nothing: the worker claims again when woken."""
    for attempt in range(1, CLAIM_ATTEMPTS + 1):
        try:
            if request_key is not None:
                return await _keyed_claim(
                    db, principal, worker_id, max_tasks, lease_seconds, request_key, start, closed
                )
            async with db.autocommit() as conn:
                return await _claim(
                    conn, principal, worker_id, max_tasks, lease_seconds, None, start, closed
                )
        except Exception as exc:
            raced = raced_a_running_limit(exc)
            if not (raced or is_deadlock(exc)):
                raise
            if attempt == CLAIM_ATTEMPTS:
                if raced:
                    return [], EventBatch()
                raise
            log.info(
                "claim for worker %s %s (attempt %d); running it again",
                worker_id,
                "raced another past a running limit" if raced else "deadlocked",
                attempt,
            )
    raise AssertionError("unreachable")


async def _claim(
    conn: Connection,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int,
    lease_seconds: float,
    request_key: str | None,
    start: bool = False,
    closed: frozenset[str] = frozenset(),
) -> tuple[list[TaskRecord], EventBatch]:
    now = utcnow()
    claimed = await store.claim(
        conn,
        principal,
        worker_id,
        max_tasks,
        claim_token=uuid4(),
        lease_until=now + timedelta(seconds=lease_seconds),
        now=now,
        request_key=request_key,
        start=start,
        closed_rooms=closed,
    )
    rows = claimed.rows
    if not rows:  # nothing claimed: is the worker unknown, or not the caller's?
        check_claim(principal, worker_id, claimed.worker_owner)
    names = await JobNames.resolve(conn, {row.job_id for row in rows})
    records = _in_queue_order(task_record(row, names[row.job_id]) for row in rows)
    events = EventBatch()
    for record in records:
        events.add(TaskStatusChanged(record, TaskStatus.PENDING))
    return records, events


async def _keyed_claim(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int,
    lease_seconds: float,
    request_key: str,
    start: bool = False,
    closed: frozenset[str] = frozenset(),
) -> tuple[list[TaskRecord], EventBatch]:
    """One transaction: the worker's row locked (SQLite: the one writer), then the tasks it
    holds under the key — or, if none, a fresh claim that leaves the key on its tasks."""
    async with db.write() as conn:
        await owned_worker(conn, principal, worker_id, lock="exclusive")
        held = await store.held_under_key(conn, worker_id, request_key, started=start)
        if not held:
            return await _claim(
                conn, principal, worker_id, max_tasks, lease_seconds, request_key, start, closed
            )
        names = await JobNames.resolve(conn, {row.job_id for row in held})
    records = _in_queue_order(task_record(row, names[row.job_id]) for row in held)
    return records[:max_tasks], EventBatch()


async def claim_next(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int,
    *,
    closed: frozenset[str],
    lease_seconds: float,
    start: bool = False,
) -> tuple[list[TaskRecord], EventBatch, DomainError | None]:
    """The claim a terminal PATCH asks for (``claim_next``), run after its write committed
    (a refused write raised before, so it claims nothing): ``claim_tasks`` with its own
    guards. A refusal (the worker unknown, or not the caller's) cannot undo that write, so
    it is returned (third item) rather than raised."""
    try:
        records, events = await claim_tasks(
            db,
            principal,
            worker_id,
            max_tasks,
            closed=closed,
            lease_seconds=lease_seconds,
            start=start,
        )
    except DomainError as exc:
        return [], EventBatch(), exc
    return records, events, None


def _in_queue_order(records: Iterable[TaskRecord]) -> list[TaskRecord]:
    return sorted(records, key=lambda r: (-r.priority, r.turn, r.id))
