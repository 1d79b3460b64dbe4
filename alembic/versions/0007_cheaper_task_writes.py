"""Cheaper task writes. Three task indexes narrowed to the rows their queries read: the
idempotency index to submits that carry a key, the lease index to claimed and running
tasks (a finished task keeps its last lease), the worker index to tasks that have a worker
(pending ones have none). Each status change of a task writes fewer index entries, and the
indexes stay small however many finished tasks the table keeps. On PostgreSQL the
pending-count update trigger loses its WHEN condition (see ``POSTGRESQL_UPDATE_UNCONDITIONAL``
below).

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


# The pending-count update trigger on PostgreSQL, frozen as this revision swapped it: the SQL
# that ``app/persistence/queue_counts.py`` generated when this migration was written (commit
# 8c7ec06), copied here so that later changes to the application cannot change what this
# migration does. The trigger fires without a WHEN condition; the function checks the
# statuses itself. PostgreSQL parses and prepares a trigger's WHEN afresh for every
# statement, which costs more than the function's early return for the two updates of a
# task that leave pending alone (claimed -> running -> completed): measured under callgrind,
# 4.6 % of PostgreSQL's instructions per task cycle. Swapped in one transaction, so no write
# goes uncounted.
POSTGRESQL_UPDATE_UNCONDITIONAL = (
    "DROP TRIGGER task_queue_update ON task",
    """
CREATE TRIGGER task_queue_update AFTER UPDATE OF status, job_id, priority, created_at ON task
FOR EACH ROW EXECUTE FUNCTION taskhub_count_pending_tasks()""",
)
# Downgrade: the update trigger as migration 0006 created it.
POSTGRESQL_UPDATE_CONDITIONAL = (
    "DROP TRIGGER task_queue_update ON task",
    """
CREATE TRIGGER task_queue_update AFTER UPDATE OF status, job_id, priority, created_at ON task
FOR EACH ROW WHEN (OLD.status = 'pending' OR NEW.status = 'pending')
EXECUTE FUNCTION taskhub_count_pending_tasks()""",
)


def _make_update_trigger_unconditional(unconditional: bool = True) -> None:
    """The change on PostgreSQL (``unconditional=False`` undoes it); nothing on SQLite,
    whose triggers compile their WHEN once, with the statement."""
    connection = op.get_bind()
    if connection.dialect.name == "postgresql":
        swap = POSTGRESQL_UPDATE_UNCONDITIONAL if unconditional else POSTGRESQL_UPDATE_CONDITIONAL
        for statement in swap:
            connection.exec_driver_sql(statement)


def upgrade() -> None:
    _run(REPLACED)
    _make_update_trigger_unconditional()


def downgrade() -> None:
    _make_update_trigger_unconditional(unconditional=False)
    _run([(new, old) for old, new in REPLACED])
