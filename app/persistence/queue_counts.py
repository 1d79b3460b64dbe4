"""Pending-task counts per (job, priority, second of submission), kept by the database.

A pending task's ``queue_position`` is a rank: how many pending tasks of its job come before
it. Counting them index entry by index entry grows with the queue (~7 ms at 50,000 here).
Instead, triggers on ``task`` keep ``task_queue_bucket``: the number of pending tasks per
job, priority and whole second of ``created_at`` — exact after every insert, status change
and delete, whichever code path (or bulk load, or old replica) makes it. A rank is then a
sum over the buckets (one row per busy second) and a count inside the task's own second,
from its nearer end (see ``app/domain/services/task_rows.py``).

The bucket of a timestamp is its whole seconds since the Unix epoch, computed alike by the
triggers of both engines and by ``bucket_of`` here. Changing the width, or any trigger,
takes a new migration (the migrations test compares the triggers the models install with
the migrated ones). SQLite drops a table's triggers when a batch migration rebuilds the
table: a later migration that rebuilds ``task`` must create them again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

BUCKET_WIDTH = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bucket_of(created_at: datetime) -> int:
    """The bucket a task submitted at ``created_at`` (UTC-aware) is counted in."""
    return (created_at - _EPOCH) // BUCKET_WIDTH


def bucket_start(bucket: int) -> datetime:
    """The first moment counted in ``bucket``."""
    return _EPOCH + bucket * BUCKET_WIDTH


# --- PostgreSQL: one PL/pgSQL function behind three row triggers --------------------------

_PG_UPDATE_TRIGGER = """
CREATE TRIGGER task_queue_update AFTER UPDATE OF status, job_id, priority, created_at ON task
FOR EACH ROW {when}EXECUTE FUNCTION taskhub_count_pending_tasks()"""

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
    _PG_UPDATE_TRIGGER.format(when="WHEN (OLD.status = 'pending' OR NEW.status = 'pending')\n"),
    """
CREATE TRIGGER task_queue_delete AFTER DELETE ON task FOR EACH ROW
WHEN (OLD.status = 'pending') EXECUTE FUNCTION taskhub_count_pending_tasks()""",
)

# Migration 0007: the update trigger fires without a WHEN condition; the function checks the
# statuses itself. PostgreSQL parses and prepares a trigger's WHEN afresh for every
# statement, which costs more than the function's early return for the two updates of a
# task that leave pending alone (claimed -> running -> completed): measured under callgrind,
# 4.6 % of PostgreSQL's instructions per task cycle. Swapped in one transaction, so no write
# goes uncounted.
POSTGRESQL_UPDATE_UNCONDITIONAL = (
    "DROP TRIGGER task_queue_update ON task",
    _PG_UPDATE_TRIGGER.format(when=""),
)
POSTGRESQL_UPDATE_CONDITIONAL = ("DROP TRIGGER task_queue_update ON task", POSTGRESQL_CREATE[2])

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


def install(connection: Any, *, backfill: bool = False) -> None:
    """Create the triggers as migration 0006 did, on a (sync) connection; with
    ``backfill``, first count the pending tasks already there. On PostgreSQL ``CREATE
    TRIGGER`` locks ``task`` against writes until the transaction ends, so nothing slips
    between the count and the triggers. ``install_current`` gives the triggers of today."""
    postgres = connection.dialect.name == "postgresql"
    statements = POSTGRESQL_CREATE if postgres else SQLITE_CREATE
    for statement in statements:
        connection.exec_driver_sql(statement)
    if backfill:
        connection.exec_driver_sql(POSTGRESQL_BACKFILL if postgres else SQLITE_BACKFILL)


def make_update_trigger_unconditional(connection: Any, unconditional: bool = True) -> None:
    """Migration 0007's change on PostgreSQL (``unconditional=False`` undoes it); nothing
    on SQLite, whose triggers compile their WHEN once, with the statement."""
    if connection.dialect.name == "postgresql":
        swap = POSTGRESQL_UPDATE_UNCONDITIONAL if unconditional else POSTGRESQL_UPDATE_CONDITIONAL
        for statement in swap:
            connection.exec_driver_sql(statement)


def install_current(connection: Any) -> None:
    """The triggers as the latest migration leaves them (for ``metadata.create_all``)."""
    install(connection)
    make_update_trigger_unconditional(connection)


def uninstall(connection: Any) -> None:
    postgres = connection.dialect.name == "postgresql"
    for statement in POSTGRESQL_DROP if postgres else SQLITE_DROP:
        connection.exec_driver_sql(statement)
