"""Who may act for a worker: its owner, or a superuser."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.errors import Forbidden, WorkerNotFound
from app.domain.records import Principal
from app.persistence.models import worker_table
from app.persistence.prepared import hot


def check_owner(principal: Principal, owner_id: UUID) -> None:
    if owner_id != principal.id and not principal.is_superuser:
        raise Forbidden("This worker belongs to another user.")


def check_worker(principal: Principal, worker_id: UUID, owner_id: UUID | None) -> None:
    """404 when the worker does not exist (``owner_id`` None), 403 when it is not the
    principal's to act for."""
    if owner_id is None:
        raise WorkerNotFound(f"Worker {worker_id} not found.")
    check_owner(principal, owner_id)


_WORKER = hot(select(worker_table).where(worker_table.c.id == bindparam("worker_id")))


async def owned_worker(conn: AsyncConnection, principal: Principal, worker_id: UUID) -> Any:
    """The worker row, if it exists (404) and ``principal`` may act for it (403)."""
    row = (await conn.execute(_WORKER, {"worker_id": worker_id})).first()
    check_worker(principal, worker_id, None if row is None else row.user_id)
    return row
