"""The statements that differ between SQLite and PostgreSQL, side by side."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Executable

from app.domain.states import TaskStatus
from app.persistence.models import link_table, task_table


def claim_statement(dialect: str, *, worker_id: UUID, claim_token: UUID, limit: int) -> Executable:
    """Claim up to ``limit`` of the oldest pending tasks of the worker's jobs, atomically.

    PostgreSQL: ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)
    RETURNING`` — concurrent claimers skip each other's rows instead of waiting or
    retrying, so no claimer comes back empty while a claimable task exists.

    SQLite: the same single ``UPDATE … RETURNING``; it runs inside a ``BEGIN IMMEDIATE``
    transaction (see ``Database.write``), which serialises writers, so ``SKIP LOCKED``
    is neither needed nor available.
    """
    task = task_table
    candidates = (
        select(task.c.id)
        .where(
            task.c.status == TaskStatus.PENDING.value,
            task.c.job_id.in_(
                select(link_table.c.job_id).where(link_table.c.worker_id == worker_id)
            ),
        )
        .order_by(task.c.created_at, task.c.id)
        .limit(limit)
    )
    if dialect == "postgresql":
        candidates = candidates.with_for_update(skip_locked=True)
    return (
        update(task)
        .where(task.c.id.in_(candidates.scalar_subquery()))
        .where(task.c.status == TaskStatus.PENDING.value)
        .values(
            status=TaskStatus.CLAIMED.value,
            worker_id=worker_id,
            claim_token=claim_token,
            attempt=task.c.attempt + 1,
        )
        .returning(*task.c)
        .execution_options(synchronize_session=False)
    )


def insert_ignoring_duplicates(dialect: str, table: Table, values: dict[str, Any]) -> Executable:
    """``INSERT … ON CONFLICT DO NOTHING`` (both engines spell it alike, via their dialects)."""
    module = postgresql if dialect == "postgresql" else sqlite
    return module.insert(table).values(**values).on_conflict_do_nothing()
