"""Jobs and tasks written straight into the tables (no service), at chosen moments."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import insert

from taskhub.clock import new_id, utcnow
from taskhub.store.database import Database
from taskhub.store.tables import job_table, task_table


async def add_job(db: Database) -> UUID:
    job_id, now = new_id(), utcnow()
    async with db.write() as conn:
        await conn.execute(
            insert(job_table).values(
                id=job_id,
                room_id="room1",
                category="modifiers",
                name=f"Job{job_id.hex[:8]}",
                schema={},
                deleted=False,
                created_at=now,
                updated_at=now,
            )
        )
    return job_id


async def add_tasks(db: Database, job_id: UUID, moments: list[datetime], **values: Any) -> list:
    """Pending tasks of ``job_id`` submitted at ``moments`` (``values`` set more columns):
    their ids, in the order of ``moments``. A task whose ``run_at`` is ahead waits for it,
    as a submit would leave it."""
    run_at = values.get("run_at")
    values.setdefault("waiting", run_at is not None and run_at > utcnow())
    rows = [
        {
            "id": new_id(),
            "job_id": job_id,
            "room_id": "room1",
            "status": "pending",
            "payload": {},
            "created_at": moment,
            "turn_at": moment,  # FIFO
            "attempt": 0,
            **values,
        }
        for moment in moments
    ]
    async with db.write() as conn:
        await conn.execute(insert(task_table), rows)
    return [row["id"] for row in rows]
