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
# Kept until the transaction ends (PostgreSQL): a removal of the worker waits for it, or,
# under way, is waited for (then the worker is gone: 404).
_WORKER_KEPT = _WORKER.with_for_update(key_share=True)


async def owned_worker(
    conn: AsyncConnection, principal: Principal, worker_id: UUID, *, keep: bool = False
) -> Any:
    """The worker row, if it exists (404) and ``principal`` may act for it (403); with
    ``keep``, locked against removal until the caller's transaction ends (for a write that
    refers to the worker, such as a job link)."""
    statement = _WORKER_KEPT if keep else _WORKER
    row = (await conn.execute(statement, {"worker_id": worker_id})).first()
    check_worker(principal, worker_id, None if row is None else row.user_id)
    return row
