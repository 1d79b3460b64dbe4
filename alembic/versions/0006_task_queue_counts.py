"""Pending-task counts kept by triggers, so queue positions stay cheap on deep queues
(expand only: a new table the triggers fill, whatever code version writes ``task``; an index
of the delayed tasks per job).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from taskhub.persistence import queue_counts

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELAYED = "status = 'pending' AND run_at IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "task_queue_bucket",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "priority", "bucket", name="pk_task_queue_bucket"),
    )
    op.create_index(
        "ix_task_delayed",
        "task",
        ["job_id", "run_at", "priority", "created_at", "id"],
        sqlite_where=sa.text(DELAYED),
        postgresql_where=sa.text(DELAYED),
    )
    queue_counts.install(op.get_bind(), backfill=True)


def downgrade() -> None:
    queue_counts.uninstall(op.get_bind())
    op.drop_index("ix_task_delayed", table_name="task")
    op.drop_table("task_queue_bucket")
