"""Queue depths per job for the metrics scrape, read off the counts the database keeps."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import func, or_, select

from taskhub.store.database import Database
from taskhub.store.tables import job_table, queue_bucket_table


class QueueCounts(NamedTuple):
    pending: int
    waiting: int  # of those pending, the ones waiting for their ``run_at``


async def pending_by_job(db: Database, limit: int) -> dict[str, QueueCounts]:
    """Pending (and waiting) tasks per job full name: every live job (0 when idle) and any
    deleted job that still has pending tasks; the ``limit`` deepest queues. Read off the
    counts the database keeps (``task_queue_bucket``), not by counting tasks."""
    buckets = queue_bucket_table
    counts = (
        select(
            buckets.c.job_id,
            func.sum(buckets.c.pending).label("pending"),
            func.sum(buckets.c.waiting).label("waiting"),
        )
        .group_by(buckets.c.job_id)
        .subquery("counts")
    )
    depth = func.coalesce(counts.c.pending, 0).label("depth")
    waiting = func.coalesce(counts.c.waiting, 0).label("waiting")
    statement = (
        select(job_table.c.room_id, job_table.c.category, job_table.c.name, depth, waiting)
        .select_from(job_table.outerjoin(counts, counts.c.job_id == job_table.c.id))
        .where(or_(~job_table.c.deleted, counts.c.pending > 0))
        .order_by(depth.desc(), job_table.c.room_id, job_table.c.category, job_table.c.name)
        .limit(limit)
    )
    async with db.read() as conn:
        rows = (await conn.execute(statement)).all()
    return {
        f"{row.room_id}:{row.category}:{row.name}": QueueCounts(int(row.depth), int(row.waiting))
        for row in rows
    }
