"""Announcing delayed and retried tasks the moment they come due.

One timer per hub process, not a loop per task: it sleeps until the earliest waiting
``run_at`` (read from the database, and lowered at once when this process publishes a
task scheduled earlier), then queues the waiting tasks that are due
(``due_tasks.queue_due``: claims and positions read queued tasks off the claim queue) and
sends ``task_available`` for every task that came due since its last look. Tasks
scheduled on another replica are seen at that replica's timer or, here, at the next look
(at most ``fallback_seconds`` away). ``task_available`` is a hint: several replicas may
each announce a task; workers claim it once. An ``@internal`` task that comes due is
dispatched instead (several replicas may each do it: harmless, see
``app/dispatch/dispatcher.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from uuid import UUID

from taskhub.clock import utcnow
from taskhub.duty import Duty
from taskhub.realtime.publisher import Publisher
from taskhub.rules.events import Event, EventBatch, TaskAvailable, TaskStatusChanged
from taskhub.rules.naming import is_internal_job
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.services.due_tasks import END_OF_MOMENT, came_due, next_due, queue_due
from taskhub.store.database import Database

log = logging.getLogger(__name__)
BATCH = 1000
FAILED_LOOK_RETRY_SECONDS = 1.0


class DueTaskAnnouncer(Duty):
    name = "due-announcer"

    def __init__(
        self,
        db: Database,
        publisher: Publisher,
        fallback_seconds: float = 30.0,
        dispatch: Callable[[list[UUID]], Awaitable[EventBatch]] | None = None,
    ):
        self._db = db
        self._publisher = publisher
        self._dispatch = dispatch
        self._fallback = fallback_seconds
        self._next: datetime | None = None
        # The earliest ``run_at`` published since the current look began: a read of the next
        # time may have missed it (committed after the read's snapshot).
        self._published_since_look: datetime | None = None
        # Every look reads up to a moment (its ``until``); this is the latest one begun.
        self._looked_until = utcnow()
        self._wake = asyncio.Event()
        self._seen_until: datetime | None = None  # set by the first cycle

    async def __call__(self, batch: list[Event]) -> None:
        """Publisher sink: a task published as pending with a ``run_at`` earlier than the
        timer's next look moves that look forward (and is remembered for the look under
        way, whose read of the next time may not see it). One whose ``run_at`` a look has
        already read past (its submit or retry committed after that moment: the look could
        not see it) is announced here and now; a look that did see it announces it too,
        harmlessly.
        """
        late: list[TaskRecord] = []
        for event in batch:
            if isinstance(event, TaskStatusChanged) and event.task.status == TaskStatus.PENDING:
                run_at = event.task.run_at
                if run_at is None:
                    continue
                if run_at <= self._looked_until:
                    late.append(event.task)
                    continue
                self._published_since_look = earliest(self._published_since_look, run_at)
                if self._next is None or run_at < self._next:
                    self._next = run_at
                    self._wake.set()
        if late:
            await self._announce_now(late)

    async def wait(self) -> None:
        if self._seen_until is not None:  # the first look runs at once
            await self._sleep()

    async def cycle(self) -> None:
        seen_until = self._seen_until or utcnow()
        self._seen_until = seen_until
        self._published_since_look = None
        self._seen_until = await self._announce(seen_until)
        found = await next_due(self._db, self._seen_until)
        self._next = earliest(found, self._published_since_look)

    def failed(self, error: Exception) -> None:
        log.error("due-task announcer failed; it looks again shortly", exc_info=error)
        # From where it was: nothing that came due meanwhile is skipped.
        retry_at = utcnow() + timedelta(seconds=FAILED_LOOK_RETRY_SECONDS)
        self._next = earliest(self._published_since_look, retry_at)

    async def _announce(self, seen_until: datetime) -> datetime:
        """Queue the waiting tasks that are due, and announce everything that came due
        since ``seen_until``; returns the new mark."""
        now = utcnow()
        self._looked_until = max(self._looked_until, now)
        while await queue_due(self._db, now, BATCH) == BATCH:
            pass
        after, after_id = seen_until, END_OF_MOMENT
        while True:
            due = await came_due(self._db, after, now, BATCH, after_id)
            await self._publisher.publish(due.events)
            if due.internal and self._dispatch is not None:
                await self._publisher.publish(await self._dispatch(due.internal))
            if due.count < BATCH or due.last is None:
                return now
            after, after_id = due.last

    async def _announce_now(self, tasks: list[TaskRecord]) -> None:
        try:  # they are due: into the claim queue first, as a look would
            await queue_due(self._db, utcnow(), BATCH)
        except Exception:  # claims take them all the same; the next look queues them
            log.warning("due-task announcer could not queue due tasks", exc_info=True)
        events, internal = EventBatch(), []
        for record in tasks:
            if is_internal_job(record.job_name):
                internal.append(record.id)
            else:
                events.add(TaskAvailable(record.job_name, record.room_id, str(record.id)))
        await self._publisher.publish(events)
        if internal and self._dispatch is not None:
            await self._publisher.publish(await self._dispatch(internal))

    async def _sleep(self) -> None:
        self._wake.clear()
        delay = self._fallback
        if self._next is not None:
            delay = min(delay, max(0.0, (self._next - utcnow()).total_seconds()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)


def earliest(first: datetime | None, second: datetime | None) -> datetime | None:
    """The earlier of two times, either of which may be unknown."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)
