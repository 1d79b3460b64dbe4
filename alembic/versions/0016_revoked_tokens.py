"""Revoked tokens remembered: ``taskhub tokens revoke`` records the hash of each token it
ends, so that ``TASKHUB_ADMIN_TOKEN`` is not granted again at the next start.

- ``revoked_token``: one row per revoked token's hash (``token_hash``, the SHA-256 kept in
  ``api_token`` before), with when it was revoked.

Expand only: a new table.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "revoked_token",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("revoked_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name="pk_revoked_token"),
    )


def downgrade() -> None:
    op.drop_table("revoked_token")
