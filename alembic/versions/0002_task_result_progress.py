"""Task results and progress (expand only: three nullable columns, safe with old replicas
still running, since they neither read nor write them).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Document = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.add_column(sa.Column("result", Document, nullable=True))
        batch.add_column(sa.Column("progress", sa.Float(), nullable=True))
        batch.add_column(sa.Column("progress_message", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task") as batch:
        batch.drop_column("progress_message")
        batch.drop_column("progress")
        batch.drop_column("result")
