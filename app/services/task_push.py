"""The claim of a task push (docs/protocol.md, "Task push"): the hub claims for a worker
that granted it slots, as that worker's own ``POST /tasks/claim`` with ``start`` would.
The grants, the wake-ups and the delivery to the worker's socket are
``realtime.task_push``'s."""

from __future__ import annotations

from uuid import UUID

from taskhub.observability import metrics
from taskhub.rules.events import EventBatch
from taskhub.rules.records import Principal, TaskRecord
from taskhub.services.claim import claim_tasks
from taskhub.store.database import Database


async def claim_pushed(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    slots: int,
    *,
    closed: frozenset[str],
    lease_seconds: float,
) -> tuple[list[TaskRecord], EventBatch]:
    """Claim and start up to ``slots`` tasks for ``worker_id`` on ``principal``'s behalf:
    the same fenced claim-and-start (guards, fresh claim token, lease, events) as a claim
    with ``start``, so the tasks are ``running`` when they are handed over. The events are
    the caller's to publish, once the tasks went out. Counted as the ``push`` shortcut.
    ``closed``: the private rooms left alone (``claim_tasks``)."""
    records, events = await claim_tasks(
        db, principal, worker_id, slots, closed=closed, lease_seconds=lease_seconds, start=True
    )
    metrics.worker_shortcut("push", len(records))
    return records, events
