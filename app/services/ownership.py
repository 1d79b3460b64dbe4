"""A step of the use cases that act for a worker: its row, if the caller may act for it
(``rules.worker_ownership``), locked as the use case needs."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from taskhub.rules.errors import WorkerNotFound
from taskhub.rules.records import Principal
from taskhub.rules.worker_ownership import check_worker
from taskhub.store import workers as store
from taskhub.store.connections import Connection


async def owned_worker(
    conn: Connection,
    principal: Principal | None,
    worker_id: UUID,
    *,
    lock: store.Lock | None = None,
) -> Any:
    """The worker row, if it exists (404) and ``principal`` may act for it (403; ``None``:
    the system may), row-locked as ``lock`` says until the caller's transaction ends."""
    row = await store.find_worker(conn, worker_id, lock=lock)
    if principal is None:
        if row is None:
            raise WorkerNotFound(f"Worker {worker_id} not found.")
        return row
    check_worker(principal, worker_id, None if row is None else row.user_id)
    return row
