"""Attempts that end without their worker saying so — the worker vanished, or its lease
ran out: the task goes back to pending (due after the retry backoff) while it has attempts
left, and fails otherwise. Every write is guarded by the caller's conditions (which
attempts: ``app/store/attempts.py``), so a heartbeat or completion that lands meanwhile
wins."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from taskhub.rules.events import EventBatch, TaskCancelled, TaskStatusChanged
from taskhub.rules.records import TaskRecord
from taskhub.rules.retries import RetryPolicy
from taskhub.rules.states import TaskStatus, previous_status
from taskhub.services.jobs import JobNames
from taskhub.store import attempts as store
from taskhub.store.connections import AsyncConnection
from taskhub.store.queue_positions import queue_position
from taskhub.store.task_rows import task_record


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    record: TaskRecord
    worker_id: UUID | None  # the worker that held the attempt

    @property
    def previous(self) -> TaskStatus:
        return previous_status(
            self.record.status,
            started=self.record.started_at is not None,
            claimed=True,
            retried=self.record.status == TaskStatus.PENDING,
        )


async def end_abandoned_attempts(
    conn: AsyncConnection,
    where: store.Which,
    *,
    error: str,
    now: datetime,
    policy: RetryPolicy,
) -> list[EndedAttempt]:
    """End the claimed/running attempts matching ``where`` (``store.held_by``,
    ``lease_ran_out``, ``worker_gone``): retry or fail each."""
    ended: list[tuple[Any, UUID | None]] = []
    for candidate in await store.retryable(conn, where):
        run_at = policy.next_run_at(candidate.attempt, now)
        row = await store.retry(
            conn, where, candidate.id, candidate.attempt, run_at=run_at, error=error, now=now
        )
        if row is not None:
            ended.append((row, candidate.worker_id))
    failed = await store.fail_exhausted(conn, where, error=error, now=now)
    ended.extend((row, row.worker_id) for row in failed)
    names = await JobNames.resolve(conn, {row.job_id for row, _ in ended})
    attempts = [EndedAttempt(task_record(row, names[row.job_id]), worker) for row, worker in ended]
    for attempt in attempts:
        attempt.record.queue_position = await queue_position(conn, attempt.record, now)
    return attempts


def ended_attempt_events(ended: list[EndedAttempt], *, tell_worker: bool) -> EventBatch:
    """Status events for the room; with ``tell_worker`` also ``task_cancelled`` to the
    worker that still runs the attempt (a lease ran out, yet the worker may be alive)."""
    events = EventBatch()
    for attempt in ended:
        events.add(TaskStatusChanged(attempt.record, attempt.previous))
        if tell_worker and attempt.worker_id is not None:
            events.add(
                TaskCancelled(
                    str(attempt.record.id), attempt.record.job_name, str(attempt.worker_id)
                )
            )
    return events
