"""Cheaper task writes. Three task indexes narrowed to the rows their queries read: the
idempotency index to submits that carry a key, the lease index to claimed and running
tasks (a finished task keeps its last lease), the worker index to tasks that have a worker
(pending ones have none). Each status change of a task writes fewer index entries, and the
indexes stay small however many finished tasks the table keeps. On PostgreSQL the
pending-count update trigger loses its WHEN condition (see
``app/persistence/queue_counts.py``).

Expand only: whatever code version runs, each of its queries still finds an index (the
narrowed ones serve the queries that read them, which imply their predicates), and the
idempotency rule holds throughout (the keyed index is built before the old one goes).
On PostgreSQL the indexes are built and dropped ``CONCURRENTLY``, outside a transaction, so
replicas keep writing tasks meanwhile; if such a build fails, PostgreSQL leaves an invalid
index of that name behind, to drop before migrating again.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from alembic import op

from taskhub.persistence import queue_counts

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


class TaskIndex(NamedTuple):
    name: str
    columns: list[str]
    where: str | None = None
    unique: bool = False


IDEMPOTENCY = ["submitted_by", "job_id", "idempotency_key"]
WORKER = ["worker_id", "status"]

# (old, new): upgrade builds each new index, then drops the old one; downgrade the reverse.
REPLACED = [
    (
        TaskIndex("ix_task_idempotency", IDEMPOTENCY, unique=True),
        TaskIndex(
            "ix_task_idempotency_keyed", IDEMPOTENCY, "idempotency_key IS NOT NULL", unique=True
        ),
    ),
    (
        TaskIndex("ix_task_lease_expires_at", ["lease_expires_at"]),
        TaskIndex("ix_task_active_lease", ["lease_expires_at"], "status IN ('claimed', 'running')"),
    ),
    (
        TaskIndex("ix_task_worker_status", WORKER),
        TaskIndex("ix_task_assigned_worker", WORKER, "worker_id IS NOT NULL"),
    ),
]


def _replace(pairs: list[tuple[TaskIndex, TaskIndex]]) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    concurrently: dict[str, Any] = {"postgresql_concurrently": True} if postgres else {}
    for old, new in pairs:
        where = (
            {}
            if new.where is None
            else {f"{dialect}_where": sa.text(new.where) for dialect in ("sqlite", "postgresql")}
        )
        op.create_index(new.name, "task", new.columns, unique=new.unique, **where, **concurrently)
        op.drop_index(old.name, table_name="task", **concurrently)


def _run(pairs: list[tuple[TaskIndex, TaskIndex]]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():  # CONCURRENTLY refuses a transaction
            _replace(pairs)
    else:
        _replace(pairs)


def upgrade() -> None:
    _run(REPLACED)
    queue_counts.make_update_trigger_unconditional(op.get_bind())


def downgrade() -> None:
    queue_counts.make_update_trigger_unconditional(op.get_bind(), unconditional=False)
    _run([(new, old) for old, new in REPLACED])
