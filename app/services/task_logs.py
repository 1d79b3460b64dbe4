"""Task logs: a worker appends a batch of its run's log lines (fenced like a PATCH), and
anyone reads a task's lines page by page. The bounds are ``rules.log_limits``'."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from taskhub.observability import metrics
from taskhub.rules.authorisation import check_update
from taskhub.rules.errors import InvalidTaskTransition, StaleClaim, TaskNotFound
from taskhub.rules.events import EventBatch, TaskLogged
from taskhub.rules.log_limits import (
    DEFAULT_LOG_LIMITS,
    LogLimits,
    RateBucket,
    fit_logger,
    fit_message,
    take,
)
from taskhub.rules.records import Principal
from taskhub.rules.states import ACTIVE_STATUSES, TaskStatus
from taskhub.store import task_logs as store
from taskhub.store.database import Database

# Buckets idle this long are full again (a bucket refills within a second): forgotten
# once there are many.
_FORGET_AFTER_SECONDS = 5.0
_MANY_BUCKETS = 10_000


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line as a worker sent it (validated: a known level, an aware ``at``)."""

    at: datetime
    level: str
    logger: str | None
    message: str


@dataclass(frozen=True, slots=True)
class Appended:
    accepted: int
    dropped: int  # lines of the batch dropped over the task's rate


class LogRates:
    """This process's rate bucket per task (each replica bounds what it takes itself),
    and the limits it applies."""

    def __init__(
        self,
        limits: LogLimits = DEFAULT_LOG_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._buckets: dict[UUID, RateBucket] = {}

    def admit(self, task_id: UUID, wanted: int, dropped_before: int) -> tuple[int, int]:
        """How many of ``wanted`` lines may be kept now, and the count to mark on the first
        line kept (``dropped_before``, the batch's own excess and what was owed). When
        none is kept, that count is owed to the next line kept."""
        now = self._clock()
        granted, bucket = take(self._buckets.get(task_id), wanted, now, self.limits)
        marked = dropped_before + (wanted - granted) + bucket.owed
        if granted:
            bucket = RateBucket(bucket.tokens, bucket.updated, 0)
        else:
            bucket = RateBucket(bucket.tokens, bucket.updated, marked)
        self._buckets[task_id] = bucket
        if len(self._buckets) > _MANY_BUCKETS:
            self._forget_idle(now)
        return granted, marked

    def _forget_idle(self, now: float) -> None:
        for task_id, bucket in list(self._buckets.items()):
            if not bucket.owed and now - bucket.updated > _FORGET_AFTER_SECONDS:
                del self._buckets[task_id]


async def append_lines(
    db: Database,
    principal: Principal,
    task_id: UUID,
    *,
    claim_token: UUID,
    lines: Sequence[LogLine],
    dropped: int,
    rates: LogRates,
) -> tuple[Appended, EventBatch]:
    """Store a batch of a run's lines once the fence, read just before, admits it: the
    task exists (404), ``claim_token`` is its current one (409 ``stale-claim``), the caller
    owns the worker holding it or is a superuser (403), and it is claimed or running (409
    ``invalid-task-transition``), exactly as a progress PATCH is fenced. Then the rate
    drops the oldest lines beyond it, and the task's oldest stored lines beyond its bound
    go; either count is marked on the oldest line kept (``dropped``). Autocommit, as a
    PATCH: see ``store.task_logs``."""
    limits = rates.limits
    events = EventBatch()
    async with db.autocommit() as conn:
        row = _fenced(principal, task_id, await store.fence_row(conn, task_id), claim_token)
        granted, marked = rates.admit(task_id, len(lines), dropped)
        kept = lines[len(lines) - granted :] if granted else []
        if not kept:
            metrics.task_log_lines(0, len(lines))
            return Appended(0, len(lines)), events
        values = [_stored(line, limits) for line in kept]
        values[0]["dropped"] = marked
        rows = await store.insert_lines(conn, task_id, int(row.attempt), values)
        over = await store.beyond(conn, task_id, limits.max_lines_per_task)
    if over is not None:
        async with db.write() as conn:
            await store.trim(conn, task_id, limits.max_lines_per_task)
            rows = await store.read_lines(conn, task_id, rows[0].id - 1, len(rows))
    metrics.task_log_lines(len(kept), len(lines) - len(kept))
    items = tuple(store.line_item(stored) for stored in rows)
    events.add(TaskLogged(str(task_id), str(row.room_id), items))
    return Appended(len(kept), len(lines) - len(kept)), events


def _fenced(principal: Principal, task_id: UUID, row: Any | None, claim_token: UUID) -> Any:
    """``row`` if a batch may be stored for it; otherwise the refusal, as a PATCH's."""
    if row is None:
        raise TaskNotFound(f"Task {task_id} not found.")
    if claim_token != row.claim_token:
        raise StaleClaim(f"Claim token is no longer current for task {task_id}.")
    if row.worker_owner is not None:  # its worker is still there: is it the caller's?
        check_update(principal, None, worker_owner=row.worker_owner, submitted_by=row.submitted_by)
    if TaskStatus(row.status) not in ACTIVE_STATUSES:
        raise InvalidTaskTransition(
            f"Logs are taken only while a task is claimed or running, not {row.status}."
        )
    return row


def _stored(line: LogLine, limits: LogLimits) -> dict[str, Any]:
    return {
        "logged_at": line.at,
        "level": line.level,
        "logger": fit_logger(line.logger, limits.max_logger_chars),
        "message": fit_message(line.message, limits.max_message_bytes),
        "dropped": 0,
    }


async def read_lines(
    db: Database, task_id: UUID, *, after: int, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` of the task's lines after the line ``after``, oldest first
    (``TaskNotFound`` when there is no such task)."""
    async with db.read() as conn:
        rows = await store.read_lines(conn, task_id, after, limit)
        if not rows and not await store.task_exists(conn, task_id):
            raise TaskNotFound(f"Task {task_id} not found.")
    return [store.line_item(row) for row in rows]
