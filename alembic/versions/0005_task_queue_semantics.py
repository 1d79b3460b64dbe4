"""Retries, priorities and delays; retention (expand only: columns with defaults or
nullable, so old replicas keep inserting valid rows; the claim queue index is replaced by one
that orders by priority — old code still claims correctly, only without its index).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "status = 'pending'"


def _partial(where: str) -> dict[str, sa.TextClause]:
    return {"sqlite_where": sa.text(where), "postgresql_where": sa.text(where)}


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(
            sa.Column("max_attempts", sa.Integer(), nullable=False, server_default=sa.text("1"))
        )
    with op.batch_alter_table("task") as batch:
        batch.add_column(
            sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(
            sa.Column("max_attempts", sa.Integer(), nullable=False, server_default=sa.text("1"))
        )
        batch.add_column(sa.Column("run_at", sa.DateTime(timezone=True), nullable=True))
    op.drop_index("ix_task_pending_queue", table_name="task")
    op.create_index(
        "ix_task_claim_queue",
        "task",
        ["job_id", sa.text("priority DESC"), "created_at", "id", "run_at", "status"],
        **_partial(PENDING),
    )
    op.create_index(
        "ix_task_due", "task", ["run_at"], **_partial(f"{PENDING} AND run_at IS NOT NULL")
    )
    op.create_index(
        "ix_task_completed_at", "task", ["completed_at"], **_partial("completed_at IS NOT NULL")
    )


def downgrade() -> None:
    op.drop_index("ix_task_completed_at", table_name="task")
    op.drop_index("ix_task_due", table_name="task")
    op.drop_index("ix_task_claim_queue", table_name="task")
    op.create_index(
        "ix_task_pending_queue", "task", ["job_id", "created_at", "id"], **_partial(PENDING)
    )
    with op.batch_alter_table("task") as batch:
        batch.drop_column("run_at")
        batch.drop_column("max_attempts")
        batch.drop_column("priority")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("max_attempts")
