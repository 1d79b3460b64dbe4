"""Who may act for a worker: its owner, or a superuser."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.errors import Forbidden, WorkerNotFound
from taskhub.rules.records import Principal
from taskhub.store.hot_statements import hot
from taskhub.store.tables import worker_table


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
# Row locks held until the transaction ends (PostgreSQL; SQLite has one writer). "keep":
# the worker is not removed meanwhile (a removal under way is waited for, then the worker
# is gone: 404). "exclusive": one at a time — a removal takes it first, and so do keyed
# claims, so everything that refers to the worker waits for the others in one order.
WORKER_LOCKS = {
    "keep": _WORKER.with_for_update(read=True, key_share=True),  # FOR KEY SHARE
    "exclusive": _WORKER.with_for_update(),
}


async def owned_worker(
    conn: AsyncConnection,
    principal: Principal | None,
    worker_id: UUID,
    *,
    lock: Literal["keep", "exclusive"] | None = None,
) -> Any:
    """The worker row, if it exists (404) and ``principal`` may act for it (403; ``None``:
    the system may), row-locked as ``lock`` says until the caller's transaction ends."""
    statement = _WORKER if lock is None else WORKER_LOCKS[lock]
    row = (await conn.execute(statement, {"worker_id": worker_id})).first()
    if principal is None:
        if row is None:
            raise WorkerNotFound(f"Worker {worker_id} not found.")
        return row
    check_worker(principal, worker_id, None if row is None else row.user_id)
    return row
