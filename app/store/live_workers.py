"""Whether a job has a live worker: one linked to it and heard of since a moment."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from sqlalchemy import exists, select

from taskhub.store.connections import Connection
from taskhub.store.tables import link_table, worker_table


async def has_live_worker(conn: Connection, job_id: UUID, since: datetime) -> bool:
    """Whether a worker linked to the job was heard of at or after ``since``."""
    live = exists().where(
        link_table.c.job_id == job_id,
        worker_table.c.id == link_table.c.worker_id,
        worker_table.c.last_heartbeat >= since,
    )
    return bool(await conn.scalar(select(live)))
