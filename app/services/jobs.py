"""Job registration, listing and soft deletion."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from taskhub.clock import new_id, utcnow
from taskhub.json_codec import dump_json
from taskhub.rules.errors import Forbidden, JobNotFound, SchemaConflict
from taskhub.rules.events import EventBatch, JobsInvalidate
from taskhub.rules.fair_share import ClaimOrder
from taskhub.rules.naming import (
    JobName,
    is_reserved,
    validate_category,
    validate_job_name,
    validate_room_id,
    visible_job_rooms,
)
from taskhub.rules.records import JobRecord, JobSummary, Page, Principal, beyond
from taskhub.services.ownership import owned_worker
from taskhub.store import jobs as store
from taskhub.store import workers as worker_store
from taskhub.store.connections import Connection
from taskhub.store.database import Database, DatabaseUnavailable
from taskhub.validation.payloads import SCHEMA_CACHE_BYTES, SchemaCache, check_schema_size
from taskhub.validation.schema_checks import check_schema_aside

log = logging.getLogger(__name__)
T = TypeVar("T")


class JobNames:
    """``job_id -> full name``. Names of a job id never change, so this cache never goes
    stale; it spares the hot paths (claim, update) a join. Bounded like ``KnownJobs``:
    past ``LIMIT`` names (jobs come and go) it starts afresh."""

    LIMIT = 10_000
    _names: dict[UUID, str] = {}

    @classmethod
    async def resolve(cls, conn: Connection, job_ids: set[UUID]) -> dict[UUID, str]:
        missing = [job_id for job_id in job_ids if job_id not in cls._names]
        if missing:
            found = await store.job_names(conn, missing)
            names = {job_id: cls._names.get(job_id) or found[job_id] for job_id in job_ids}
            if len(cls._names) + len(found) > cls.LIMIT:
                cls._names.clear()
            cls._names.update(found)
            return names
        return {job_id: cls._names[job_id] for job_id in job_ids}

    @classmethod
    async def one(cls, conn: Connection, job_id: UUID) -> str:
        return (await cls.resolve(conn, {job_id}))[job_id]


class KnownJobs(SchemaCache[Any]):
    """Job rows by full name, as this process last read them: a submit uses one instead of
    looking the job up. An entry is only a guess — the task insert is guarded by the job's
    id and version (``updated_at``, which every change of the job moves), so after a
    soft-delete, a revival or a re-registration elsewhere it inserts nothing, and the
    submit reads the job again.

    Bounded by its rows' schemas (``SchemaCache``)."""

    def __init__(self, limit: int = 10_000, schema_budget: int = SCHEMA_CACHE_BYTES) -> None:
        super().__init__(schema_budget, limit)

    def remember(self, full_name: str, row: Any) -> None:
        self.put(full_name, row, row.schema)


@dataclass(slots=True)
class Registration:
    job: JobRecord
    worker_id: UUID
    created: bool


async def register_job(
    db: Database,
    principal: Principal,
    room_id: str,
    *,
    category: str,
    name: str,
    schema: dict[str, Any],
    worker_id: UUID | None,
    allowed_categories: list[str],
    max_attempts: int | None = None,
    claim_order: ClaimOrder | None = None,
    max_running_per_submitter: int | None = None,
    max_running_per_room: int | None = None,
) -> tuple[Registration, EventBatch]:
    """Register (or revive, or idempotently re-register) a job and link a worker to it.
    ``max_attempts``, when given, becomes the job's default for new tasks (also on a
    re-registration); a new job without it gets 1. ``claim_order`` likewise (a new job
    without it is FIFO); tasks already queued keep their places. The running limits
    (``rules.running_limits``) likewise, 0 removing one."""
    limits = {
        "max_running_per_submitter": max_running_per_submitter,
        "max_running_per_room": max_running_per_room,
    }
    validate_room_id(room_id)
    if is_reserved(room_id) and not principal.is_superuser:
        raise Forbidden(f"Only superusers may register jobs in {room_id!r}.")
    validate_category(category, allowed_categories)
    validate_job_name(name)
    await check_schema_aside(schema, check_schema_size(schema))
    events = EventBatch()
    async with db.write() as conn:
        if worker_id is None:
            worker_id = new_id()
            await worker_store.insert_worker(conn, worker_id, principal.id, utcnow())
        else:
            await owned_worker(conn, principal, worker_id, lock="keep")

        # Locked against a soft-delete under way (``soft_delete_orphans``): this waits for
        # it and then sees the job deleted (and revives it), or it waits for this.
        row = await store.lock_job_named(conn, room_id, category, name)
        created = False
        if row is None:
            new_job_id = new_id()
            await store.insert_job(
                conn,
                new_job_id,
                room_id,
                category,
                name,
                schema=schema,
                max_attempts=max_attempts or 1,
                claim_order=(claim_order or ClaimOrder.FIFO).value,
                now=utcnow(),
                **{name: value or None for name, value in limits.items()},
            )
            row = await store.lock_job_named(conn, room_id, category, name)
            assert row is not None  # inserted, or another registration's
            created = row.id == new_job_id
        elif row.deleted:
            await store.revive_job(conn, row.id, schema)
            created = True
        if not created and row.schema != schema:
            raise SchemaConflict(
                f"Job {room_id}:{category}:{name} is already registered with another schema."
            )
        if not created and dump_json(row.schema) != dump_json(schema):
            # The same schema in another key order (one stored before 0009 kept jsonb's):
            # the order sent is the order of the page's form fields.
            await store.rewrite_schema(conn, row.id, schema)
        policy = _policy_changes(row, max_attempts, claim_order, limits)
        if policy:
            if not created and not principal.is_superuser:
                await _check_policy_is_callers(
                    conn, row.id, principal, f"{room_id}:{category}:{name}"
                )
            await store.set_policy(conn, row.id, **policy)
        linked = await store.link_worker(conn, worker_id, row.id)
        if created or linked:
            events.add(JobsInvalidate(room_id))
        workers = await store.job_workers(conn, row.id)
    record = JobRecord(
        id=row.id,
        room_id=room_id,
        category=category,
        name=name,
        schema=schema,
        deleted=False,
        workers=workers,
        max_attempts=max_attempts or row.max_attempts,
        claim_order=claim_order.value if claim_order else row.claim_order,
        **{
            name: getattr(row, name) if value is None else value or None
            for name, value in limits.items()
        },
    )
    return Registration(job=record, worker_id=worker_id, created=created), events


def _policy_changes(
    row: Any,
    max_attempts: int | None,
    claim_order: ClaimOrder | None,
    limits: dict[str, int | None],
) -> dict[str, Any]:
    """What of the job's policy a registration sets anew (what it leaves out stays; a limit
    of 0 goes)."""
    changes: dict[str, Any] = {
        name: value or None
        for name, value in limits.items()
        if value is not None and (value or None) != getattr(row, name)
    }
    if max_attempts is not None and max_attempts != row.max_attempts:
        changes["max_attempts"] = max_attempts
    if claim_order is not None and claim_order.value != row.claim_order:
        changes["claim_order"] = claim_order.value
    return changes


async def _check_policy_is_callers(
    conn: Connection, job_id: UUID, principal: Principal, full_name: str
) -> None:
    """A live job's policy (retry default, claim order, running limits) is changed only by
    a user whose workers are all that serve it (or a superuser): joining someone else's job
    does not rewrite their policy."""
    if await store.count_other_users_workers(conn, job_id, principal.id):
        raise SchemaConflict(
            f"Job {full_name} is served by other users' workers with its policy (max_attempts, "
            "claim_order, running limits) as it is; register without it (or with the job's "
            "own) to join it."
        )


async def list_jobs(db: Database, room_id: str, limit: int, offset: int) -> Page[JobSummary]:
    """The room's live jobs plus ``@global`` and ``@internal`` ones, newest first (without
    their schemas: a page of 500 might have held 128 MB of them, decoded)."""
    validate_room_id(room_id)
    rooms = visible_job_rooms(room_id)
    async with db.read() as conn:
        total = await store.count_live_jobs(conn, rooms)
        items: list[JobSummary] = (
            []
            if beyond(total, limit, offset)
            else await store.live_job_page(conn, rooms, limit, offset)
        )
    return Page(items=items, total=total, limit=limit, offset=offset)


async def is_live(db: Database, room_id: str, category: str, name: str) -> bool:
    """Whether the room has a live job of this name (a registration then only links a
    worker to it, or re-registers it)."""
    async with db.read() as conn:
        return await store.find_live_job(conn, room_id, category, name) is not None


async def get_job(db: Database, room_id: str, full_name: str) -> JobRecord:
    validate_room_id(room_id)
    async with db.read() as conn:
        row = await find_visible_job(conn, room_id, full_name)
        workers = await store.job_workers(conn, row.id)
    return _record(row, workers)


def visible_job_name(room_id: str, full_name: str) -> JobName:
    """``full_name`` parsed, if ``room_id`` may see jobs of its room, else ``JobNotFound``."""
    parsed = JobName.parse(full_name)
    if parsed.room_id not in visible_job_rooms(room_id):
        raise JobNotFound(f"Job {full_name!r} is not visible from room {room_id!r}.")
    return parsed


async def find_visible_job(conn: Connection, room_id: str, full_name: str) -> Any:
    """The live job called ``full_name`` if ``room_id`` may see it, else ``JobNotFound``."""
    parsed = visible_job_name(room_id, full_name)
    row = await store.find_live_job(conn, parsed.room_id, parsed.category, parsed.name)
    if row is None:
        raise JobNotFound(f"Job {full_name!r} not found.")
    return row


def _record(row: Any, workers: list[UUID]) -> JobRecord:
    return JobRecord(
        id=row.id,
        room_id=row.room_id,
        category=row.category,
        name=row.name,
        schema=row.schema,
        deleted=row.deleted,
        workers=workers,
        max_attempts=row.max_attempts,
        claim_order=row.claim_order,
        max_running_per_submitter=row.max_running_per_submitter,
        max_running_per_room=row.max_running_per_room,
    )


async def soft_delete_if_orphaned(db: Database, job_id: UUID) -> str | None:
    """``soft_delete_orphans_after_commit`` of one job: its room when it was deleted."""
    return next(iter(await soft_delete_orphans_after_commit(db, [job_id])), None)


async def soft_delete_orphans_after_commit(db: Database, job_ids: Iterable[UUID]) -> list[str]:
    """``soft_delete_orphans`` as the follow-up of a change that has committed (a task's
    end, a worker's removal). When the database cannot serve it now, the change's answer
    and events stand all the same: the sweeper's orphan sweep deletes those jobs later
    (``sweeps.soft_delete_orphaned_jobs``), as it does when the process stops in between."""
    try:
        return await soft_delete_orphans(db, job_ids)
    except DatabaseUnavailable as exc:
        log.warning("Orphaned jobs are left to the sweeper: %s", exc.detail)
        return []


async def orphaned_jobs(db: Database, limit: int) -> list[UUID]:
    """Up to ``limit`` live jobs with no worker and no pending task (``@internal`` ones
    aside): what ``soft_delete_orphans`` would delete."""
    async with db.read() as conn:
        return await store.orphaned_job_ids(conn, limit)


# Ids per statement where a statement takes a list of them (within every engine's
# parameter limit).
IDS_PER_STATEMENT = 1000


def chunked(ids: list[T]) -> Iterator[list[T]]:
    """``ids`` in lists of at most ``IDS_PER_STATEMENT``."""
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        yield ids[start : start + IDS_PER_STATEMENT]


async def soft_delete_orphans(db: Database, job_ids: Iterable[UUID]) -> list[str]:
    """Soft-delete those of ``job_ids`` left with no worker and no pending task
    (``@internal`` jobs are exempt). Run after the change
    that may have orphaned them (a worker's removal, a task's end) has committed, in a
    transaction of its own: each job row is locked first (in id order), then checked by a
    statement of its own. On PostgreSQL a statement sees only what committed before it
    began, so a check made before the lock was granted would miss a registration or a
    submit committed meanwhile (and two removals at once would each see the other's link);
    registrations and submits lock the job row too (``FOR KEY SHARE``), so whichever comes
    second sees what the first did. One statement per ``IDS_PER_STATEMENT`` ids. The room
    of each job deleted."""
    ids = sorted(set(job_ids))
    rooms: list[str] = []
    if not ids:
        return rooms
    async with db.write() as conn:
        for chunk in chunked(ids):
            rooms.extend(await store.soft_delete_if_orphaned(conn, chunk))
    return rooms
