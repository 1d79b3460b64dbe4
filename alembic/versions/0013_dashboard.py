"""What the room page's dashboard needs: re-runs, worker slots, task logs, a room's
finished tasks by time.

- ``task.rerun_of``: the task a re-run repeats (no foreign key: the original may be purged
  before its re-run).
- ``worker.slots``: how many tasks the worker runs at once, as its SDK reported it (NULL:
  not reported, as by clients that predate it).
- ``task_log``: the log lines a run sent, deleted with their task.
- ``ix_task_room_completed``: a room's finished tasks by ``completed_at``, which the
  room's aggregates read a window of.

Expand only: nullable columns, a new table, a new index.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("task", sa.Column("rerun_of", sa.Uuid(), nullable=True))
    op.add_column("worker", sa.Column("slots", sa.Integer(), nullable=True))
    op.create_index(
        "ix_task_room_completed",
        "task",
        ["room_id", "completed_at"],
        sqlite_where=sa.text("completed_at IS NOT NULL"),
        postgresql_where=sa.text("completed_at IS NOT NULL"),
    )
    op.create_table(
        "task_log",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("logged_at", Timestamp, nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("logger", sa.String(length=128), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("dropped", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["task.id"], name="fk_task_log_task_id_task", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_task_log"),
    )
    op.create_index("ix_task_log_task_id_id", "task_log", ["task_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_task_log_task_id_id", table_name="task_log")
    op.drop_table("task_log")
    op.drop_index("ix_task_room_completed", table_name="task")
    # Plain SQL on both engines (SQLite 3.35+): a batch rebuild of ``task`` would drop
    # its triggers.
    op.execute("ALTER TABLE worker DROP COLUMN slots")
    op.execute("ALTER TABLE task DROP COLUMN rerun_of")
