"""The statements of jobs: registration (the job row locked by name, inserted, revived,
changed, linked to a worker), lookups, listings, and the soft-delete of orphaned jobs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, and_, bindparam, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.clock import utcnow
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.rules.records import JobSummary
from taskhub.rules.states import TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.inserts import insert_ignoring_duplicates
from taskhub.store.tables import job_table, link_table, task_table, worker_table

job = job_table


async def job_names(conn: Connection, job_ids: Sequence[UUID]) -> dict[UUID, str]:
    """The full name of each of ``job_ids`` that exists."""
    rows = await conn.execute(
        select(job.c.id, job.c.room_id, job.c.category, job.c.name).where(job.c.id.in_(job_ids))
    )
    return {row.id: f"{row.room_id}:{row.category}:{row.name}" for row in rows}


async def lock_job_named(conn: AsyncConnection, room_id: str, category: str, name: str) -> Any:
    """The job row called ``room_id:category:name``, deleted or not (None if there is none),
    locked ``FOR KEY SHARE`` against a soft-delete under way (``soft_delete_if_orphaned``):
    this waits for it and then sees the job deleted, or it waits for this."""
    key = and_(job.c.room_id == room_id, job.c.category == category, job.c.name == name)
    this_job = select(job).where(key).with_for_update(read=True, key_share=True)
    return (await conn.execute(this_job)).first()


async def insert_job(
    conn: AsyncConnection,
    job_id: UUID,
    room_id: str,
    category: str,
    name: str,
    *,
    schema: dict[str, Any],
    max_attempts: int,
    claim_order: str,
    now: datetime,
    **limits: int | None,
) -> None:
    """Insert a live job, unless one of that name exists already (then nothing)."""
    values = dict(
        id=job_id,
        room_id=room_id,
        category=category,
        name=name,
        schema=schema,
        deleted=False,
        created_at=now,
        updated_at=now,
        max_attempts=max_attempts,
        claim_order=claim_order,
        **limits,
    )
    await conn.execute(insert_ignoring_duplicates(conn.dialect.name, job, values))


async def revive_job(conn: AsyncConnection, job_id: UUID, schema: dict[str, Any]) -> None:
    """Undo the job's soft-delete, with ``schema``."""
    await conn.execute(
        update(job)
        .where(job.c.id == job_id)
        .values(deleted=False, schema=schema, updated_at=utcnow())
    )


async def rewrite_schema(conn: AsyncConnection, job_id: UUID, schema: dict[str, Any]) -> None:
    """Store ``schema`` as it is (an equal one, in another key order: no new version)."""
    await conn.execute(update(job).where(job.c.id == job_id).values(schema=schema))


async def set_policy(conn: AsyncConnection, job_id: UUID, **policy: Any) -> None:
    """Change the job's ``max_attempts``, ``claim_order`` and running limits (a new version:
    a submit that read the job before inserts nothing, and reads it again). Its pending,
    claimed and running tasks are marked ``limited`` as the job now is."""
    changed = (
        await conn.execute(
            update(job)
            .where(job.c.id == job_id)
            .values(**policy, updated_at=utcnow())
            .returning(job.c.max_running_per_submitter, job.c.max_running_per_room)
        )
    ).one()
    limited = (
        changed.max_running_per_submitter is not None or changed.max_running_per_room is not None
    )
    await conn.execute(
        update(task_table)
        .where(
            task_table.c.job_id == job_id,
            task_table.c.status.in_(["pending", "claimed", "running"]),
            task_table.c.limited.is_not(limited),
        )
        .values(limited=limited)
    )


async def link_worker(conn: AsyncConnection, worker_id: UUID, job_id: UUID) -> bool:
    """Link the worker to the job; False if it was linked already."""
    linked = await conn.execute(
        insert_ignoring_duplicates(
            conn.dialect.name, link_table, {"worker_id": worker_id, "job_id": job_id}
        )
    )
    return bool(linked.rowcount)


async def count_other_users_workers(conn: Connection, job_id: UUID, user_id: UUID) -> int:
    """How many workers of users other than ``user_id`` serve the job."""
    others = await conn.scalar(
        select(func.count())
        .select_from(link_table.join(worker_table, worker_table.c.id == link_table.c.worker_id))
        .where(link_table.c.job_id == job_id, worker_table.c.user_id != user_id)
    )
    return int(others or 0)


async def job_workers(conn: Connection, job_id: UUID) -> list[UUID]:
    """The ids of the workers linked to the job, in order."""
    rows = await conn.execute(
        select(link_table.c.worker_id)
        .where(link_table.c.job_id == job_id)
        .order_by(link_table.c.worker_id)
    )
    return list(rows.scalars())


def _live_jobs_of(rooms: Sequence[str]) -> ColumnElement[bool]:
    return and_(job.c.room_id.in_(rooms), job.c.deleted.is_(False))


async def count_live_jobs(conn: Connection, rooms: Sequence[str]) -> int:
    """How many live jobs ``rooms`` hold."""
    return int(
        await conn.scalar(select(func.count()).select_from(job).where(_live_jobs_of(rooms))) or 0
    )


_SUMMARY_COLUMNS = (job.c.id, job.c.room_id, job.c.category, job.c.name)


async def live_job_page(
    conn: Connection, rooms: Sequence[str], limit: int, offset: int
) -> list[JobSummary]:
    """A page of the live jobs of ``rooms`` (without their schemas), newest first, each
    with its workers."""
    rows = (
        await conn.execute(
            select(*_SUMMARY_COLUMNS)
            .where(_live_jobs_of(rooms))
            .order_by(job.c.created_at.desc(), job.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
    ).all()
    links: dict[UUID, list[UUID]] = {row.id: [] for row in rows}
    if rows:
        for link in await conn.execute(
            select(link_table.c.job_id, link_table.c.worker_id)
            .where(link_table.c.job_id.in_(list(links)))
            .order_by(link_table.c.worker_id)
        ):
            links[link.job_id].append(link.worker_id)
    return [JobSummary(row.id, row.room_id, row.category, row.name, links[row.id]) for row in rows]


async def job_policy(conn: Connection, job_id: UUID) -> Any:
    """The job's ``claim_order`` and running limits (None if there is no such job)."""
    policy = select(
        job.c.claim_order, job.c.max_running_per_submitter, job.c.max_running_per_room
    ).where(job.c.id == job_id)
    return (await conn.execute(policy)).first()


# Built once: SQLAlchemy then reuses its cache key and compiled form.
_FIND_LIVE_JOB = select(job).where(
    job.c.room_id == bindparam("room_id"),
    job.c.category == bindparam("category"),
    job.c.name == bindparam("name"),
    job.c.deleted.is_(False),
)


async def find_live_job(conn: Connection, room_id: str, category: str, name: str) -> Any:
    """The live job row called ``room_id:category:name``, None if there is none."""
    params = {"room_id": room_id, "category": category, "name": name}
    return (await conn.execute(_FIND_LIVE_JOB, params)).first()


def _orphaned() -> list[ColumnElement[bool]]:
    """A live job that is no ``@internal`` one, with no worker and no pending task."""
    return [
        job.c.deleted.is_(False),
        job.c.room_id != INTERNAL_ROOM,
        ~exists().where(link_table.c.job_id == job.c.id),
        ~exists().where(
            task_table.c.job_id == job.c.id,
            task_table.c.status == TaskStatus.PENDING.value,
        ),
    ]


async def orphaned_job_ids(conn: Connection, limit: int) -> list[UUID]:
    """Up to ``limit`` live jobs with no worker and no pending task (``@internal`` ones
    aside)."""
    return list(await conn.scalars(select(job.c.id).where(*_orphaned()).limit(limit)))


async def soft_delete_if_orphaned(conn: AsyncConnection, job_ids: Sequence[UUID]) -> list[str]:
    """Soft-delete those of ``job_ids`` left with no worker and no pending task; the room
    of each job deleted. The job rows are locked first (``FOR UPDATE``, in id order), then
    checked by a statement of its own, which on PostgreSQL sees what committed while it
    waited for the locks."""
    await conn.execute(
        select(job.c.id)
        .where(job.c.id.in_(job_ids), job.c.deleted.is_(False))
        .order_by(job.c.id)
        .with_for_update()
    )
    result = await conn.execute(
        update(job)
        .where(job.c.id.in_(job_ids), *_orphaned())
        .values(deleted=True, updated_at=utcnow())
        .returning(job.c.room_id)
    )
    return list(result.scalars())
