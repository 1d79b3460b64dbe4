"""Worker lifecycle: creation, heartbeats, listing, and the cleanup shared by
``DELETE /workers/{id}``, the sweeper and socket disconnects."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from taskhub.clock import new_id, utcnow
from taskhub.rules.errors import Forbidden, WorkerNotFound
from taskhub.rules.events import EventBatch, JobsInvalidate, WorkerRemoved
from taskhub.rules.naming import JobName, validate_room_id, visible_job_rooms
from taskhub.rules.providers import ProviderName
from taskhub.rules.records import Page, Principal, RoomWorker, WorkerRecord, beyond
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy
from taskhub.services.attempts import end_abandoned_attempts, ended_attempt_events
from taskhub.services.jobs import soft_delete_orphans_after_commit
from taskhub.services.ownership import owned_worker
from taskhub.services.providers import invalidations, removed_with_workers
from taskhub.store import room_workers as room_store
from taskhub.store import workers as store
from taskhub.store.attempts import held_by
from taskhub.store.connections import AsyncConnection
from taskhub.store.database import Database

WORKER_DISCONNECTED = "Worker disconnected"


async def create_worker(
    db: Database, principal: Principal, slots: int | None = None
) -> WorkerRecord:
    """A new worker of the caller's; ``slots``: how many tasks it runs at once, if known."""
    record = WorkerRecord(id=new_id(), user_id=principal.id, last_heartbeat=utcnow(), slots=slots)
    async with db.write() as conn:
        await store.insert_worker(conn, record.id, record.user_id, record.last_heartbeat, slots)
    return record


async def heartbeat(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    *,
    cancelled_within: float | None = None,
    lease_seconds: float | None = None,
    running: list[UUID] | None = None,
    slots: int | None = None,
) -> WorkerRecord:
    """Record that the worker is alive (one guarded statement on the common path). With
    ``cancelled_within``, also report the worker's tasks cancelled in that many seconds,
    so a worker that missed the ``task_cancelled`` event still stops those runs. With
    ``lease_seconds``, extend the leases of the worker's claimed/running tasks — only of
    those in ``running`` when the worker says which it runs, so a task it never heard of
    (a lost claim reply) runs out of lease and is recovered. ``slots``: how many tasks it
    runs at once now (kept; None leaves what it reported before)."""
    now = utcnow()
    async with db.autocommit() as conn:
        owner_id = None if principal.is_superuser else principal.id
        row = await store.heartbeat(conn, worker_id, now, owner_id=owner_id, slots=slots)
        if row is None:
            await owned_worker(conn, principal, worker_id)  # raises 404 or 403
            raise WorkerNotFound(f"Worker {worker_id} not found.")  # pragma: no cover
        record = WorkerRecord(
            id=row.id, user_id=row.user_id, last_heartbeat=row.last_heartbeat, slots=row.slots
        )
        if lease_seconds is not None:
            until = now + timedelta(seconds=lease_seconds)
            await store.extend_leases(conn, worker_id, until, running)
        if cancelled_within is not None:
            since = now - timedelta(seconds=cancelled_within)
            record.cancelled_tasks = await store.cancelled_since(conn, worker_id, since)
    return record


async def check_serves(db: Database, worker_id: UUID, job: JobName) -> None:
    """403 unless the worker is linked to the live job ``job`` (its wake-up room
    ``jobs:{name}`` would otherwise tell it of tasks of jobs it cannot serve)."""
    async with db.read() as conn:
        served = await store.serves(conn, worker_id, job.room_id, job.category, job.name)
    if not served:
        raise Forbidden(
            f"Worker {worker_id} does not serve {job.full_name}: register it for that job "
            "first (PUT /rooms/{room}/jobs with its worker_id)."
        )


async def existing_workers(db: Database, worker_ids: set[UUID]) -> set[UUID]:
    """Those of ``worker_ids`` the hub still has (a removed worker's id is never reused)."""
    async with db.read() as conn:
        return await store.existing_worker_ids(conn, worker_ids)


async def delete_worker(
    db: Database,
    principal: Principal | None,
    worker_id: UUID,
    *,
    reason: str = WORKER_DISCONNECTED,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> EventBatch:
    """Remove a worker: its claimed/running tasks are retried or fail with ``reason``, its
    links go, and then jobs left without workers and pending tasks are soft-deleted.
    ``principal=None`` is the system (sweeper, disconnect)."""
    async with db.write() as conn:
        await owned_worker(conn, principal, worker_id, lock="exclusive")
        removal = await remove_worker(conn, worker_id, reason, policy)
    await soft_delete_orphans_after_commit(db, removal.jobs)
    return removal.events


async def remove_silent_worker(
    db: Database,
    worker_id: UUID,
    silent_since: datetime,
    *,
    reason: str = WORKER_DISCONNECTED,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> EventBatch | None:
    """Remove the worker only if nothing has been heard of it since ``silent_since`` (no
    heartbeat, no re-join on any replica); ``None`` if it was heard of (or is gone). The
    guard and the removal share one transaction, and the guard row-locks the worker, so a
    heartbeat landing meanwhile wins."""
    async with db.write() as conn:
        if not await store.lock_if_silent(conn, worker_id, silent_since):
            return None
        removal = await remove_worker(conn, worker_id, reason, policy)
    await soft_delete_orphans_after_commit(db, removal.jobs)
    return removal.events


@dataclass
class Removal:
    events: EventBatch
    # The jobs it may have left orphaned: for ``soft_delete_orphans`` once it has committed.
    jobs: set[UUID]


async def remove_worker(
    conn: AsyncConnection, worker_id: UUID, reason: str, policy: RetryPolicy = DEFAULT_RETRY_POLICY
) -> Removal:
    """The cleanup itself, inside the caller's transaction: the worker's claimed/running
    tasks are retried (attempts left) or fail with ``reason``, its links go."""
    ended = await end_abandoned_attempts(
        conn, held_by(worker_id), error=reason, now=utcnow(), policy=policy
    )
    events = ended_attempt_events(ended, tell_worker=False)
    job_rows = await store.linked_jobs(conn, worker_id)
    providers = await removed_with_workers(conn, [worker_id])
    await store.delete_worker(conn, worker_id)  # its providers go with it
    for job_row in job_rows:
        events.add(JobsInvalidate(job_row.room_id))
    events.extend(invalidations([row.room_id for row in providers]))
    events.add(worker_removed(worker_id, job_rows, providers))
    jobs = {row.id for row in job_rows} | {attempt.record.job_id for attempt in ended}
    return Removal(events, jobs)


async def _page(
    db: Database, limit: int, offset: int, rooms: tuple[str, ...] | None = None
) -> Page[WorkerRecord]:
    async with db.read() as conn:
        total = await store.count_workers(conn, rooms)
        items = (
            []
            if beyond(total, limit, offset)
            else await store.worker_page(conn, limit, offset, rooms)
        )
    return Page(items=items, total=total, limit=limit, offset=offset)


async def list_workers(db: Database, limit: int, offset: int) -> Page[WorkerRecord]:
    return await _page(db, limit, offset)


async def list_room_workers(
    db: Database, room_id: str, limit: int, offset: int
) -> Page[RoomWorker]:
    """Workers serving at least one live job visible from ``room_id``, newest first, each
    with its owner's name, those jobs, its slots and its claimed/running tasks."""
    validate_room_id(room_id)
    rooms = visible_job_rooms(room_id)
    async with db.read() as conn:
        total = await store.count_workers(conn, rooms)
        page = (
            []
            if beyond(total, limit, offset)
            else await store.worker_page(conn, limit, offset, rooms)
        )
        ids = [record.id for record in page]
        rows = await room_store.worker_rows(conn, ids) if ids else {}
        jobs = await room_store.visible_jobs(conn, ids, rooms) if ids else {}
        active = await room_store.active_tasks(conn, ids) if ids else {}
    items = []
    for record in page:
        row = rows.get(record.id)
        if row is None:  # removed between the two reads
            continue
        running, used = active.get(record.id, ([], 0))
        items.append(
            RoomWorker(
                id=record.id,
                user_id=record.user_id,
                owner=row.owner,
                last_heartbeat=record.last_heartbeat,
                created_at=row.created_at,
                slots=row.slots,
                job_count=record.job_count,
                jobs=jobs.get(record.id, []),
                running=running,
                used=used,
            )
        )
    return Page(items=items, total=total, limit=limit, offset=offset)


def worker_removed(worker_id: UUID, jobs: Iterable[Any], providers: Iterable[Any]) -> WorkerRemoved:
    """The removal's event, from the rows (room_id, category, name) of the jobs the worker
    was linked to and of the providers that went with it."""
    return WorkerRemoved(
        worker_id,
        tuple(sorted(JobName(row.room_id, row.category, row.name).full_name for row in jobs)),
        tuple(
            sorted(ProviderName(row.room_id, row.category, row.name).full_name for row in providers)
        ),
    )
