"""The statements of workers: creation, the row lookup (and its locks), heartbeats and
lease extensions, listings, and a worker's removal."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from sqlalchemy import ColumnElement, Select, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.records import WorkerRecord
from taskhub.rules.states import TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.tables import is_active, job_table, link_table, task_table, worker_table

worker = worker_table
Lock = Literal["keep", "exclusive"]


async def insert_worker(
    conn: Connection, worker_id: UUID, user_id: UUID, now: datetime, slots: int | None = None
) -> None:
    await conn.execute(
        insert(worker).values(
            id=worker_id, user_id=user_id, last_heartbeat=now, created_at=now, slots=slots
        )
    )


_WORKER = hot(select(worker).where(worker.c.id == bindparam("worker_id")))
# Row locks held until the transaction ends (PostgreSQL; SQLite has one writer). "keep":
# the worker is not removed meanwhile (a removal under way is waited for, then the worker
# is gone: 404). "exclusive": one at a time — a removal takes it first, and so do keyed
# claims, so everything that refers to the worker waits for the others in one order.
WORKER_LOCKS = {
    "keep": _WORKER.with_for_update(read=True, key_share=True),  # FOR KEY SHARE
    "exclusive": _WORKER.with_for_update(),
}


async def find_worker(conn: Connection, worker_id: UUID, *, lock: Lock | None = None) -> Any:
    """The worker row (None if there is none), row-locked as ``lock`` says until the
    transaction ends."""
    statement = _WORKER if lock is None else WORKER_LOCKS[lock]
    return (await conn.execute(statement, {"worker_id": worker_id})).first()


_BEAT_ANY = (
    update(worker)
    .where(worker.c.id == bindparam("b_worker_id"))
    .values(
        last_heartbeat=bindparam("b_now"),
        # A beat that reports its slots sets them; one that does not leaves them.
        slots=func.coalesce(bindparam("b_slots", type_=worker.c.slots.type), worker.c.slots),
    )
    .returning(worker.c.id, worker.c.user_id, worker.c.last_heartbeat, worker.c.slots)
)
_BEAT_OWN = _BEAT_ANY.where(worker.c.user_id == bindparam("b_user_id"))
EXTEND_ALL_LEASES = (
    update(task_table)
    .where(
        task_table.c.worker_id == bindparam("b_worker_id"),
        is_active(),
    )
    .values(lease_expires_at=bindparam("b_until"))
)
_EXTEND_LISTED_LEASES = EXTEND_ALL_LEASES.where(
    task_table.c.id.in_(bindparam("b_ids", expanding=True))
)


async def heartbeat(
    conn: Connection,
    worker_id: UUID,
    now: datetime,
    *,
    owner_id: UUID | None,
    slots: int | None = None,
) -> Any:
    """Set the worker's ``last_heartbeat`` to ``now`` (and its ``slots``, when given) — only
    if it belongs to ``owner_id`` (None: whoever it belongs to); its (id, user_id,
    last_heartbeat, slots), None if not beaten."""
    params = {"b_worker_id": worker_id, "b_user_id": owner_id, "b_now": now, "b_slots": slots}
    beat = _BEAT_ANY if owner_id is None else _BEAT_OWN
    return (await conn.execute(beat, params)).first()


async def extend_leases(
    conn: Connection, worker_id: UUID, until: datetime, running: list[UUID] | None
) -> None:
    """Extend to ``until`` the leases of the worker's claimed/running tasks (only of those
    in ``running``, unless None)."""
    params = {"b_worker_id": worker_id, "b_until": until, "b_ids": running or []}
    extend = EXTEND_ALL_LEASES if running is None else _EXTEND_LISTED_LEASES
    await conn.execute(extend, params)


async def cancelled_since(conn: Connection, worker_id: UUID, since: datetime) -> list[UUID]:
    """The worker's tasks cancelled at or after ``since``."""
    return list(
        await conn.scalars(
            select(task_table.c.id).where(
                task_table.c.worker_id == worker_id,
                task_table.c.status == TaskStatus.CANCELLED.value,
                task_table.c.completed_at >= since,
            )
        )
    )


async def serves(conn: Connection, worker_id: UUID, room_id: str, category: str, name: str) -> bool:
    """Whether the worker is linked to the live job ``room_id:category:name``."""
    served = await conn.scalar(
        select(func.count())
        .select_from(link_table.join(job_table, job_table.c.id == link_table.c.job_id))
        .where(
            link_table.c.worker_id == worker_id,
            job_table.c.room_id == room_id,
            job_table.c.category == category,
            job_table.c.name == name,
            job_table.c.deleted.is_(False),
        )
    )
    return bool(served)


async def existing_worker_ids(conn: Connection, worker_ids: Collection[UUID]) -> set[UUID]:
    """Those of ``worker_ids`` that exist."""
    ids = sorted(worker_ids)
    return set(await conn.scalars(select(worker.c.id).where(worker.c.id.in_(ids))))


async def lock_if_silent(conn: AsyncConnection, worker_id: UUID, silent_since: datetime) -> bool:
    """Whether the worker exists and was not heard of since ``silent_since``; if so its row
    stays locked (an update that changes nothing) until the transaction ends."""
    still_silent = await conn.scalar(
        update(worker)
        .where(worker.c.id == worker_id, worker.c.last_heartbeat < silent_since)
        .values(last_heartbeat=worker.c.last_heartbeat)
        .returning(worker.c.id)
    )
    return still_silent is not None


async def linked_jobs(conn: AsyncConnection, worker_id: UUID) -> Sequence[Any]:
    """(id, room_id, category, name) of the jobs the worker is linked to."""
    rows = await conn.execute(
        select(job_table.c.id, job_table.c.room_id, job_table.c.category, job_table.c.name)
        .join(link_table, link_table.c.job_id == job_table.c.id)
        .where(link_table.c.worker_id == worker_id)
    )
    return rows.all()


async def delete_worker(conn: AsyncConnection, worker_id: UUID) -> None:
    """Delete the worker's links, then the worker."""
    await conn.execute(delete(link_table).where(link_table.c.worker_id == worker_id))
    await conn.execute(delete(worker).where(worker.c.id == worker_id))


def _summary_query(where: ColumnElement[bool]) -> Select[Any]:
    job_count = (
        select(func.count())
        .where(link_table.c.worker_id == worker.c.id)
        .scalar_subquery()
        .label("job_count")
    )
    return select(
        worker.c.id, worker.c.user_id, worker.c.last_heartbeat, worker.c.slots, job_count
    ).where(where)


async def _page(
    conn: Connection, where: ColumnElement[bool], limit: int, offset: int
) -> list[WorkerRecord]:
    rows = await conn.execute(
        _summary_query(where)
        .order_by(worker.c.created_at.desc(), worker.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return [
        WorkerRecord(
            id=row.id,
            user_id=row.user_id,
            last_heartbeat=row.last_heartbeat,
            job_count=row.job_count,
            slots=row.slots,
        )
        for row in rows
    ]


async def _count(conn: Connection, where: ColumnElement[bool]) -> int:
    return int(await conn.scalar(select(func.count()).select_from(worker).where(where)) or 0)


def _serving(rooms: Sequence[str]) -> ColumnElement[bool]:
    """Workers serving at least one live job of ``rooms``."""
    serving = (
        select(link_table.c.worker_id)
        .join(job_table, job_table.c.id == link_table.c.job_id)
        .where(job_table.c.room_id.in_(rooms), job_table.c.deleted.is_(False))
    )
    among: ColumnElement[bool] = worker.c.id.in_(serving)
    return among


_EVERY_WORKER = worker.c.id.is_not(None)


async def count_workers(conn: Connection, rooms: Sequence[str] | None = None) -> int:
    """How many workers there are (with ``rooms``: serving a live job of one of them)."""
    return await _count(conn, _EVERY_WORKER if rooms is None else _serving(rooms))


async def worker_page(
    conn: Connection, limit: int, offset: int, rooms: Sequence[str] | None = None
) -> list[WorkerRecord]:
    """A page of ``count_workers``'s workers with their job counts, newest first."""
    return await _page(conn, _EVERY_WORKER if rooms is None else _serving(rooms), limit, offset)
