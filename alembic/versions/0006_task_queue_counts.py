"""Pending-task counts kept by triggers, so queue positions stay cheap on deep queues
(expand only: a new table the triggers fill, whatever code version writes ``task``; an index
of the delayed tasks per job).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELAYED = "status = 'pending' AND run_at IS NOT NULL"

# The triggers that keep ``task_queue_bucket``, frozen as this revision created them: the SQL
# that ``app/persistence/queue_counts.py`` generated when this migration was written (commit
# 0b956fe), copied here so that later changes to the application cannot change what this
# migration does. Later revisions change them (0007, 0011), each with its own copy.

# --- PostgreSQL: one PL/pgSQL function behind three row triggers --------------------------

_PG_BUCKET = "floor(extract(epoch FROM {row}.created_at))::bigint"

POSTGRESQL_CREATE = (
    f"""
CREATE FUNCTION taskhub_count_pending_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.status = 'pending' THEN
            UPDATE task_queue_bucket SET pending = pending - 1
             WHERE job_id = OLD.job_id AND priority = OLD.priority
               AND bucket = {_PG_BUCKET.format(row="OLD")}
            RETURNING pending INTO remaining;
            IF remaining = 0 THEN
                DELETE FROM task_queue_bucket
                 WHERE job_id = OLD.job_id AND priority = OLD.priority
                   AND bucket = {_PG_BUCKET.format(row="OLD")} AND pending = 0;
            END IF;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.status = 'pending' THEN
            INSERT INTO task_queue_bucket AS counted (job_id, priority, bucket, pending)
            VALUES (NEW.job_id, NEW.priority, {_PG_BUCKET.format(row="NEW")}, 1)
            ON CONFLICT (job_id, priority, bucket)
            DO UPDATE SET pending = counted.pending + 1;
        END IF;
    END IF;
    RETURN NULL;
END
$$""",
    """
CREATE TRIGGER task_queue_insert AFTER INSERT ON task FOR EACH ROW
WHEN (NEW.status = 'pending') EXECUTE FUNCTION taskhub_count_pending_tasks()""",
    """
CREATE TRIGGER task_queue_update AFTER UPDATE OF status, job_id, priority, created_at ON task
FOR EACH ROW WHEN (OLD.status = 'pending' OR NEW.status = 'pending')
EXECUTE FUNCTION taskhub_count_pending_tasks()""",
    """
CREATE TRIGGER task_queue_delete AFTER DELETE ON task FOR EACH ROW
WHEN (OLD.status = 'pending') EXECUTE FUNCTION taskhub_count_pending_tasks()""",
)

POSTGRESQL_DROP = (
    "DROP TRIGGER IF EXISTS task_queue_delete ON task",
    "DROP TRIGGER IF EXISTS task_queue_update ON task",
    "DROP TRIGGER IF EXISTS task_queue_insert ON task",
    "DROP FUNCTION IF EXISTS taskhub_count_pending_tasks()",
)

# --- SQLite: one trigger per direction (SQLite triggers have no procedural branches) -------

# The stored text is 'YYYY-MM-DD HH:MM:SS.ffffff'; its fraction is cut off before parsing,
# as SQLite would round it to milliseconds (xx.9995 would count in the next second).
_SQLITE_BUCKET = "CAST(strftime('%s', substr({row}.created_at, 1, 19)) AS INTEGER)"
_SQLITE_ENTER = f"""
    INSERT INTO task_queue_bucket (job_id, priority, bucket, pending)
    VALUES (NEW.job_id, NEW.priority, {_SQLITE_BUCKET.format(row="NEW")}, 1)
    ON CONFLICT (job_id, priority, bucket) DO UPDATE SET pending = pending + 1;"""
_SQLITE_LEAVE = f"""
    UPDATE task_queue_bucket SET pending = pending - 1
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_SQLITE_BUCKET.format(row="OLD")};
    DELETE FROM task_queue_bucket
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_SQLITE_BUCKET.format(row="OLD")} AND pending = 0;"""
_SQLITE_UPDATE = "AFTER UPDATE OF status, job_id, priority, created_at ON task"

SQLITE_CREATE = (
    f"""
CREATE TRIGGER task_queue_insert AFTER INSERT ON task
WHEN NEW.status = 'pending' BEGIN{_SQLITE_ENTER}
END""",
    f"""
CREATE TRIGGER task_queue_update_leave {_SQLITE_UPDATE}
WHEN OLD.status = 'pending' BEGIN{_SQLITE_LEAVE}
END""",
    f"""
CREATE TRIGGER task_queue_update_enter {_SQLITE_UPDATE}
WHEN NEW.status = 'pending' BEGIN{_SQLITE_ENTER}
END""",
    f"""
CREATE TRIGGER task_queue_delete AFTER DELETE ON task
WHEN OLD.status = 'pending' BEGIN{_SQLITE_LEAVE}
END""",
)

SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS task_queue_delete",
    "DROP TRIGGER IF EXISTS task_queue_update_enter",
    "DROP TRIGGER IF EXISTS task_queue_update_leave",
    "DROP TRIGGER IF EXISTS task_queue_insert",
)

_BACKFILL = """
INSERT INTO task_queue_bucket (job_id, priority, bucket, pending)
SELECT job_id, priority, {bucket}, count(*) FROM task WHERE status = 'pending'
GROUP BY job_id, priority, {bucket}"""

POSTGRESQL_BACKFILL = _BACKFILL.format(bucket=_PG_BUCKET.format(row="task"))
SQLITE_BACKFILL = _BACKFILL.format(bucket=_SQLITE_BUCKET.format(row="task"))


def _install(connection: Any) -> None:
    """Create the triggers, then count the pending tasks already there. On PostgreSQL
    ``CREATE TRIGGER`` locks ``task`` against writes until the transaction ends, so nothing
    slips between the triggers and the count."""
    postgres = connection.dialect.name == "postgresql"
    for statement in POSTGRESQL_CREATE if postgres else SQLITE_CREATE:
        connection.exec_driver_sql(statement)
    connection.exec_driver_sql(POSTGRESQL_BACKFILL if postgres else SQLITE_BACKFILL)


def _uninstall(connection: Any) -> None:
    postgres = connection.dialect.name == "postgresql"
    for statement in POSTGRESQL_DROP if postgres else SQLITE_DROP:
        connection.exec_driver_sql(statement)


def upgrade() -> None:
    op.create_table(
        "task_queue_bucket",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "priority", "bucket", name="pk_task_queue_bucket"),
    )
    op.create_index(
        "ix_task_delayed",
        "task",
        ["job_id", "run_at", "priority", "created_at", "id"],
        sqlite_where=sa.text(DELAYED),
        postgresql_where=sa.text(DELAYED),
    )
    _install(op.get_bind())


def downgrade() -> None:
    _uninstall(op.get_bind())
    op.drop_index("ix_task_delayed", table_name="task")
    op.drop_table("task_queue_bucket")
