"""Tasks that wait for their ``run_at`` kept apart from the claim queue.

A job's delayed tasks sat in the claim queue's index among the ready ones, in priority and
submission order: every claim of the job stepped over the delayed tasks submitted before
its head, an empty claim over all of them, and a submit's or a read's queue position counted
them row by row (100,000 delayed tasks: about 20 ms for each, on either engine). Now
``task.waiting`` marks a pending task whose ``run_at`` was ahead when it entered pending;
the due-task announcer clears it once the task is due. The claim queue index holds only
pending tasks that do not wait; ``ix_task_delayed`` only the waiting ones; and the queue
counts (``task_queue_bucket.waiting``) also count the waiting tasks, so that a position sums
them instead of counting them.

Expand only: two columns with defaults, the waiting tasks marked (those pending with a
``run_at`` after the migration's moment), both indexes rebuilt under their new predicates,
the count triggers replaced and the counts taken afresh — on PostgreSQL in one transaction
that locks ``task`` against writes until it commits (the index builds read the whole table:
migrate a big database at a quiet time). Replicas of the older version still running keep
working, more slowly (their claims and positions no longer find the claim queue index,
whose predicate they do not spell), and a delayed task they submit is not marked waiting:
it is claimable when due as before, but ahead of the queued tasks in positions until it is
claimed. Upgrade every replica promptly.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from taskhub.persistence import queue_counts
from taskhub.persistence.types import UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "status = 'pending'"
CLAIM_QUEUE = ["job_id", sa.text("priority DESC"), "created_at", "id", "run_at", "status"]
DELAYED = ["job_id", "run_at", "priority", "created_at", "id"]


def _partial(where: str) -> dict[str, sa.TextClause]:
    return {f"{dialect}_where": sa.text(where) for dialect in ("sqlite", "postgresql")}


def _indexes(*, waiting: bool) -> None:
    """Both indexes as of this revision (``waiting``) or of the one before."""
    for name in ("ix_task_claim_queue", "ix_task_delayed"):
        op.drop_index(name, table_name="task")
    if waiting:
        queued = _partial(f"{PENDING} AND NOT waiting")
        op.create_index("ix_task_claim_queue", "task", [*CLAIM_QUEUE, "waiting"], **queued)
        delayed = _partial(f"{PENDING} AND waiting")
        op.create_index("ix_task_delayed", "task", [*DELAYED, "status", "waiting"], **delayed)
    else:
        op.create_index("ix_task_claim_queue", "task", CLAIM_QUEUE, **_partial(PENDING))
        delayed = _partial(f"{PENDING} AND run_at IS NOT NULL")
        op.create_index("ix_task_delayed", "task", DELAYED, **delayed)


def upgrade() -> None:
    false = sa.false()
    op.add_column("task", sa.Column("waiting", sa.Boolean(), nullable=False, server_default=false))
    op.add_column(
        "task_queue_bucket",
        sa.Column("waiting", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    task = sa.table(
        "task", sa.column("status"), sa.column("run_at", UTCDateTime), sa.column("waiting")
    )
    now = datetime.now(UTC)
    op.get_bind().execute(
        sa.update(task)
        .where(task.c.status == "pending", task.c.run_at > sa.bindparam("now", now, UTCDateTime))
        .values(waiting=sa.true())
    )
    _indexes(waiting=True)
    queue_counts.count_waiting(op.get_bind())


def downgrade() -> None:
    queue_counts.count_waiting(op.get_bind(), count=False)
    _indexes(waiting=False)
    op.drop_column("task_queue_bucket", "waiting")
    op.drop_column("task", "waiting")
