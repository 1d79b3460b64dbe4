"""The digest of the submit that created a task with an Idempotency-Key.

A submit that repeats a key with another request (another payload, priority, schedule or
``max_attempts``) is refused (422 ``idempotency-key-reused``) instead of being answered
the original task as if it matched. The comparison needs the request as sent, which the
task's columns do not keep exactly (``delay_seconds`` becomes a ``run_at``; a missing
``max_attempts`` becomes the job's): ``task.request_digest`` holds a digest of it.

Expand only: one nullable column, no backfill. Tasks submitted before (NULL) replay for any
request with their key, as before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("task", sa.Column("request_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    # Plain SQL on both engines (SQLite 3.35+): a batch rebuild of ``task`` would drop
    # its triggers.
    op.execute("ALTER TABLE task DROP COLUMN request_digest")
