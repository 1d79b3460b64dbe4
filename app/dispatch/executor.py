"""Executing one ``@internal`` task: RUNNING, run the job, COMPLETED or FAILED — each step
a guarded write, each followed by publishing its events.

A run has a token of its own (the task's claim token from its start on): its finish is
guarded by it, and it tells a write of this run that committed although the connection was
lost before its answer from one that did not. Writes that lose their connection are tried
again for up to ``WRITE_RETRY_SECONDS`` (a database restart, a killed backend), so that a
run's outcome is not lost to a moment's outage."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

from taskhub.dispatch.definitions import InternalContext
from taskhub.dispatch.registry import InternalRegistry
from taskhub.json_codec import dump_json
from taskhub.realtime.publisher import Publisher
from taskhub.rules.events import EventBatch, TaskStatusChanged
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.services import internal_tasks
from taskhub.store.database import Database, is_connection_lost

log = logging.getLogger(__name__)
WRITE_RETRY_SECONDS = 60.0
CANCELLED_RUN_SECONDS = 5.0  # how long a cancelled run may take to unwind at shutdown
Write = Callable[[], Awaitable[tuple[TaskRecord | None, EventBatch]]]


@dataclass
class InternalRuntime:
    """What the executor needs, in the server process (embedded) or a taskiq worker."""

    db: Database
    publisher: Publisher
    registry: InternalRegistry
    runs: set[asyncio.Task[Any]] = field(default_factory=set)  # executions under way here

    async def execute(self, task_id: UUID, attempt: int) -> None:
        run = asyncio.current_task()
        assert run is not None
        self.runs.add(run)
        try:
            await execute(self, task_id, attempt)
        finally:
            self.runs.discard(run)

    async def drain(self, seconds: float) -> None:
        """Let the executions under way here finish for up to ``seconds``, then cancel the
        rest and wait for them to let go of their connections. A cancelled run's task stays
        running until the sweeper fails it (``internal_task_timeout_seconds``), as when a
        taskiq worker process is killed."""
        if not self.runs:
            return
        _, unfinished = await asyncio.wait(set(self.runs), timeout=seconds)
        if not unfinished:
            return
        log.warning(
            "shutting down: cancelling %d internal task run(s) still under way", len(unfinished)
        )
        for run in unfinished:
            run.cancel()
        await asyncio.wait(unfinished, timeout=CANCELLED_RUN_SECONDS)


async def execute(runtime: InternalRuntime, task_id: UUID, attempt: int) -> None:
    db, run = runtime.db, uuid4()
    record, events = await retried_write(
        db,
        task_id,
        run,
        lambda: internal_tasks.start(db, task_id, attempt, run),
        done=(TaskStatus.RUNNING,),
        previous=TaskStatus.CLAIMED,
    )
    if record is None:
        log.info("internal task %s attempt %s: not runnable any more; skipped", task_id, attempt)
        return
    await runtime.publisher.publish(events)
    definition = runtime.registry.get(record.job_name)
    ctx = InternalContext(
        task_id=task_id,
        room_id=record.room_id,
        attempt=attempt,
        db=db,
        submitted_by=record.submitted_by,
    )
    outcome: dict[str, Any]
    try:
        if definition is None:
            raise LookupError(f"no executor for {record.job_name} in this process")
        result = await definition.model_validate(record.payload).execute(ctx)
        outcome = {"result": _as_stored(result)}
    except Exception as exc:
        log.warning("internal task %s failed: %s", task_id, exc)
        outcome = {"error": str(exc) or type(exc).__name__}
    _, events = await retried_write(
        db,
        task_id,
        run,
        lambda: internal_tasks.finish(db, task_id, attempt, run, **outcome),
        done=(TaskStatus.COMPLETED, TaskStatus.FAILED),
        previous=TaskStatus.RUNNING,
    )
    await runtime.publisher.publish(events)


def _as_stored(result: Any) -> Any:
    """``result`` if the database can store it as JSON, else ``ValueError`` (ending the
    task failed: written as it is, the write would fail and leave it running)."""
    try:
        dump_json(result)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"The job's result is not JSON: {exc}") from exc
    return result


async def retried_write(
    db: Database,
    task_id: UUID,
    run: UUID,
    write: Write,
    *,
    done: tuple[TaskStatus, ...],
    previous: TaskStatus,
) -> tuple[TaskRecord | None, EventBatch]:
    """``write()``, tried again while the database connection is lost. After a lost
    answer the write may have committed: if the task shows it (one of the ``done``
    statuses under this run's token), that is the outcome, announced as from ``previous``."""
    deadline = time.monotonic() + WRITE_RETRY_SECONDS
    delay, uncertain = 0.25, False
    while True:
        try:
            record, events = await write()
            if record is None and uncertain:
                record = await internal_tasks.written_by(db, task_id, run, done)
                if record is not None:
                    events = EventBatch()
                    events.add(TaskStatusChanged(record, previous))
            return record, events
        except Exception as exc:
            if not is_connection_lost(exc) or time.monotonic() > deadline:
                raise
            log.warning("internal task %s: database connection lost (%s); retrying", task_id, exc)
            uncertain = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
