"""Task leases (expand only: a nullable column and its index).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_task_lease_expires_at", "task", ["lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_task_lease_expires_at", table_name="task")
    with op.batch_alter_table("task") as batch:
        batch.drop_column("lease_expires_at")
