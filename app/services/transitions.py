"""Moving a task through its state machine (a PATCH): transitions, cancels, retries and
progress reports."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from taskhub.clock import utcnow
from taskhub.rules.authorisation import check_update
from taskhub.rules.errors import InvalidTaskTransition, StaleClaim, TaskNotFound
from taskhub.rules.events import EventBatch, JobsInvalidate, TaskCancelled, TaskStatusChanged
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy, may_retry
from taskhub.rules.states import (
    TaskStatus,
    check_patch_transition,
    is_terminal,
    previous_status,
)
from taskhub.services.jobs import JobNames, soft_delete_if_orphaned
from taskhub.store import task_updates as store
from taskhub.store.connections import Connection
from taskhub.store.database import Database
from taskhub.store.queue_positions import queue_position
from taskhub.store.task_rows import task_record


async def update_task(
    db: Database,
    principal: Principal,
    task_id: UUID,
    *,
    status: TaskStatus | None,
    error: str | None = None,
    claim_token: UUID | None = None,
    result: Any = None,
    progress: float | None = None,
    progress_message: str | None = None,
    lease_seconds: float | None = None,
    retry: bool = False,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    maintains_room: bool = False,
) -> tuple[TaskRecord, EventBatch]:
    """Apply a PATCH — a transition, or (``status=None``) a progress report while running —
    as one guarded ``UPDATE … WHERE id = ? AND status IN (allowed predecessors) AND
    <caller may> [AND claim_token = ?] RETURNING`` (``store.task_updates``). Only when it
    matches nothing is the task read again, to say why (404, 403, stale claim, bad
    transition). Every write here is one self-guarded statement, so none needs a
    transaction.

    ``failed`` with ``retry`` sends the task back to pending (due after the policy's
    backoff) while it has attempts left; the attempt read for that decision is part of the
    guard, so a concurrent change makes the write match nothing.

    ``maintains_room``: the caller maintains the task's private room (its cancel then
    needs no role towards the task, ``rules.authorisation.update_unrestricted``)."""
    events = EventBatch()
    async with db.autocommit() as conn:
        now = utcnow()
        again = None
        if retry and status == TaskStatus.FAILED:
            attempt = await _retryable_attempt(conn, task_id)
            if attempt is not None:
                again = store.Retry(attempt, retry_policy.next_run_at(attempt, now))
        lease_until = None
        if lease_seconds is not None and (status is None or status == TaskStatus.RUNNING):
            lease_until = now + timedelta(seconds=lease_seconds)
        updated = await store.update_status(
            conn,
            principal,
            task_id,
            status,
            now=now,
            claim_token=claim_token,
            error=error,
            result=result,
            progress=progress,
            progress_message=progress_message,
            lease_until=lease_until,
            retry=again,
            maintains_room=maintains_room,
        )
        if updated is None:
            await _explain_refusal(conn, principal, task_id, status, claim_token, maintains_room)
            raise InvalidTaskTransition(f"Task {task_id} changed concurrently; retry.")
        row = updated.row
        record = task_record(row, await JobNames.one(conn, row.job_id))
        record.result = updated.result
        record.queue_position = await queue_position(conn, record, now)
        events.add(TaskStatusChanged(record, _previous(record, status, retried=again is not None)))
        if status == TaskStatus.CANCELLED and record.worker_id is not None:
            events.add(TaskCancelled(str(record.id), record.job_name, str(record.worker_id)))
    if status is not None and is_terminal(record.status) and not row.job_served:
        room = await soft_delete_if_orphaned(db, record.job_id)
        if room is not None:
            events.add(JobsInvalidate(room))
    return record, events


def _previous(record: TaskRecord, target: TaskStatus | None, *, retried: bool) -> TaskStatus:
    if target is None:  # a progress report
        return record.status
    return previous_status(
        record.status,
        started=record.started_at is not None,
        claimed=retried or record.worker_id is not None,
        retried=retried,
    )


async def _retryable_attempt(conn: Connection, task_id: UUID) -> int | None:
    """The task's current attempt, if another one may follow it."""
    current = await store.current_attempt(conn, task_id)
    if current is None or not may_retry(*current):
        return None
    return current[0]


async def _explain_refusal(
    conn: Connection,
    principal: Principal,
    task_id: UUID,
    target: TaskStatus | None,
    claim_token: UUID | None,
    maintains_room: bool,
) -> None:
    """Raise the reason the guarded update matched nothing, in the order a client needs."""
    row = await store.task_with_worker_owner(conn, task_id)
    if row is None:
        raise TaskNotFound(f"Task {task_id} not found.")
    # ``worker_owner`` is None when no worker holds the task (or it was removed).
    facts = {
        "worker_owner": row.worker_owner,
        "submitted_by": row.submitted_by,
        "maintains_room": maintains_room,
    }
    if claim_token is not None:
        # The token is handed only to the claimant: a matching one proves who writes, even
        # after its worker was removed (its late write then gets 409, not 403).
        if claim_token != row.claim_token:
            raise StaleClaim(f"Claim token is no longer current for task {task_id}.")
        if row.worker_owner is not None:  # its worker is still there: is it the caller's?
            check_update(principal, target, **facts)
    else:
        check_update(principal, target, **facts)
    if target is not None:
        check_patch_transition(TaskStatus(row.status), target)
    elif row.status != TaskStatus.RUNNING.value:
        raise InvalidTaskTransition(f"Progress is reported only while running, not {row.status}.")
