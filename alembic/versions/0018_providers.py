"""Providers: data answered on demand by a connected client (docs/protocol.md, "Providers").

- ``provider``: one row per provider, unique by ``(room_id, category, name)``; it goes with
  its worker (ON DELETE CASCADE) and with its user. An ``@internal`` one is the hub's own:
  no worker, no user.

Expand only: a new table, which older replicas neither read nor write.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-09
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "provider",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("room_id", sa.String(length=128), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=False),
        sa.Column("content_type", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("worker_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["app_user.id"], name="fk_provider_user_id_app_user", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["worker_id"], ["worker.id"], name="fk_provider_worker_id_worker", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_provider"),
        sa.UniqueConstraint(
            "room_id", "category", "name", name="uq_provider_room_id_category_name"
        ),
    )
    op.create_index("ix_provider_worker_id", "provider", ["worker_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_provider_worker_id", table_name="provider")
    op.drop_table("provider")
