"""A cluster lease as a row: what holds the sweeper lease when the hub reaches
PostgreSQL through a pooler in transaction mode (``TASKHUB_DATABASE_POOLER=transaction``),
where a session advisory lock cannot be kept.

- ``cluster_lease``: one row per lease name; ``holder`` is the process that holds it
  until ``expires_at`` (the database's clock), renewed by each of its cycles.

Expand only: a new table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "cluster_lease",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_cluster_lease"),
    )


def downgrade() -> None:
    op.drop_table("cluster_lease")
