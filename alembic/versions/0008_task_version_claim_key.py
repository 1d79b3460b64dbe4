"""Task versions and claim keys.

``task.version`` counts the writes of a task (1 at submit, one more on every change), and
every ``task_status_event`` carries it, so that a client can drop an event that arrives
after a later one (events of one task can come from several processes: replicas, the
taskiq worker). ``task.claim_key`` is the ``Idempotency-Key`` of the claim that took the
task, so that the claim repeated (its answer lost) gets the same tasks.

Expand only: two columns, added without rebuilding the table (SQLite keeps the
pending-count triggers). Replicas of an older version still running leave the version as
it is when they write (a client then sees equal versions, which it applies) and ignore
claim keys.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "task", sa.Column("version", sa.Integer(), nullable=False, server_default=sa.text("1"))
    )
    op.add_column("task", sa.Column("claim_key", sa.String(length=255), nullable=True))


def downgrade() -> None:
    op.drop_column("task", "claim_key")
    op.drop_column("task", "version")
