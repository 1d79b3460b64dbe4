"""Executing one ``@internal`` task: RUNNING, run the job, COMPLETED or FAILED — each step
a guarded write, each followed by publishing its events."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from app.dispatch.definitions import InternalContext
from app.dispatch.registry import InternalRegistry
from app.domain.services import internal_tasks
from app.persistence.database import Database
from app.realtime.publisher import Publisher

log = logging.getLogger(__name__)


@dataclass
class InternalRuntime:
    """What the executor needs, in the server process (embedded) or a taskiq worker."""

    db: Database
    publisher: Publisher
    registry: InternalRegistry


async def execute(runtime: InternalRuntime, task_id: UUID, attempt: int) -> None:
    record, events = await internal_tasks.start(runtime.db, task_id, attempt)
    if record is None:
        log.info("internal task %s attempt %s: not runnable any more; skipped", task_id, attempt)
        return
    await runtime.publisher.publish(events)
    definition = runtime.registry.get(record.job_name)
    ctx = InternalContext(task_id=task_id, room_id=record.room_id, attempt=attempt, db=runtime.db)
    try:
        if definition is None:
            raise LookupError(f"no executor for {record.job_name} in this process")
        result = await definition.model_validate(record.payload).execute(ctx)
    except Exception as exc:
        log.warning("internal task %s failed: %s", task_id, exc)
        _, events = await internal_tasks.finish(
            runtime.db, task_id, attempt, error=str(exc) or type(exc).__name__
        )
    else:
        _, events = await internal_tasks.finish(runtime.db, task_id, attempt, result=result)
    await runtime.publisher.publish(events)
