"""Initial schema: users and tokens, workers, jobs, worker-job links, tasks.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)
Document = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
PENDING_ONLY = sa.text("status = 'pending'")


def upgrade() -> None:
    op.create_table(
        "app_user",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("is_superuser", sa.Boolean(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_app_user"),
        sa.UniqueConstraint("name", name="uq_app_user_name"),
    )
    op.create_table(
        "job",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("room_id", sa.String(length=128), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("schema", Document, nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job"),
        sa.UniqueConstraint("room_id", "category", "name", name="uq_job_room_id_category_name"),
    )
    op.create_table(
        "api_token",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["app_user.id"], name="fk_api_token_user_id_app_user", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_api_token"),
        sa.UniqueConstraint("token_hash", name="uq_api_token_token_hash"),
    )
    op.create_index("ix_api_token_user_id", "api_token", ["user_id"])
    op.create_table(
        "worker",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("last_heartbeat", Timestamp, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["app_user.id"], name="fk_worker_user_id_app_user", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_worker"),
    )
    op.create_index("ix_worker_last_heartbeat", "worker", ["last_heartbeat"])
    op.create_index("ix_worker_user_id", "worker", ["user_id"])
    op.create_table(
        "worker_job_link",
        sa.Column("worker_id", sa.Uuid(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name="fk_worker_job_link_job_id_job", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["worker_id"],
            ["worker.id"],
            name="fk_worker_job_link_worker_id_worker",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("worker_id", "job_id", name="pk_worker_job_link"),
    )
    op.create_index("ix_worker_job_link_job_id", "worker_job_link", ["job_id"])
    op.create_table(
        "task",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("room_id", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("payload", Document, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("started_at", Timestamp, nullable=True),
        sa.Column("completed_at", Timestamp, nullable=True),
        sa.Column("worker_id", sa.Uuid(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("submitted_by", sa.Uuid(), nullable=True),
        sa.Column("claim_token", sa.Uuid(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"], name="fk_task_job_id_job"),
        sa.ForeignKeyConstraint(
            ["submitted_by"],
            ["app_user.id"],
            name="fk_task_submitted_by_app_user",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_task"),
    )
    op.create_index(
        "ix_task_pending_queue",
        "task",
        ["job_id", "created_at", "id"],
        sqlite_where=PENDING_ONLY,
        postgresql_where=PENDING_ONLY,
    )
    op.create_index("ix_task_room_created", "task", ["room_id", "created_at"])
    op.create_index("ix_task_job_room_created", "task", ["job_id", "room_id", "created_at"])
    op.create_index("ix_task_worker_status", "task", ["worker_id", "status"])


def downgrade() -> None:
    op.drop_table("task")
    op.drop_table("worker_job_link")
    op.drop_table("worker")
    op.drop_table("api_token")
    op.drop_table("job")
    op.drop_table("app_user")
