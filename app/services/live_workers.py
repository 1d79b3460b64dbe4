"""The optional refusal of a submit to a job no live worker serves
(``TASKHUB_SUBMIT_REQUIRES_LIVE_WORKER``): without it the task would wait, unclaimed, for
a worker that may never come."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from taskhub.clock import utcnow
from taskhub.rules.errors import NoWorkersAvailable
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.store import live_workers as store
from taskhub.store.database import Database


@runtime_checkable
class LiveWorkerRule(Protocol):
    """What the rule reads of the hub's settings (``taskhub.settings.Settings`` has it)."""

    submit_requires_live_worker: bool
    worker_timeout_seconds: float


async def require_live_worker(db: Database, job: Any, settings: object) -> None:
    """409 ``no-workers-available`` when the rule is on (``settings`` has it, and it is
    set) and no worker linked to ``job`` (a job row) was heard of within the worker
    timeout. ``@internal`` jobs are the hub's executor's: never refused."""
    if not isinstance(settings, LiveWorkerRule) or not settings.submit_requires_live_worker:
        return
    if job.room_id == INTERNAL_ROOM:
        return
    since = utcnow() - timedelta(seconds=settings.worker_timeout_seconds)
    async with db.read() as conn:
        live = await store.has_live_worker(conn, job.id, since)
    if not live:
        name = f"{job.room_id}:{job.category}:{job.name}"
        raise NoWorkersAvailable(
            f"No live worker serves {name}: nothing was stored. Submit again once a worker "
            "has registered for it."
        )
