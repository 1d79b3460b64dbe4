"""Idempotent submits (expand only: a nullable column and a unique index; NULL keys never
collide, so existing rows and old replicas are unaffected).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(length=255), nullable=True))
    op.create_index(
        "ix_task_idempotency",
        "task",
        ["submitted_by", "job_id", "idempotency_key"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_task_idempotency", table_name="task")
    with op.batch_alter_table("task") as batch:
        batch.drop_column("idempotency_key")
