"""Pending-task counts per (job, priority, second of turn), kept by the database.

A pending task's ``queue_position`` is a rank: how many pending tasks of its job come before
it. Counting them index entry by index entry grows with the queue (~7 ms at 50,000 here).
Instead, triggers on ``task`` keep ``task_queue_bucket``: the number of pending tasks per
job, priority and whole second of ``turn_at`` (the task's place in its job's queue: its
``created_at`` in a FIFO job, see ``rules/fair_share.py``; since migration 0015), and of
those the ones ``waiting`` for their ``run_at`` (since migration 0011) — exact after every
insert, status change and delete, whichever code path (or bulk load) makes it. A rank is
then a sum over the buckets (one row per busy second) and a count inside the task's own
second, from its nearer end (see ``app/store/queue_positions.py``).

The bucket of a timestamp is its whole seconds since the Unix epoch, computed alike by the
triggers of both engines and by ``bucket_of`` here. Changing the width, or any trigger,
takes a new migration (the migrations test compares the triggers the models install with
the migrated ones). SQLite drops a table's triggers when a batch migration rebuilds the
table: a later migration that rebuilds ``task`` must create them again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from taskhub.rules.running_limits import LIMIT_RACE_SQLSTATE

BUCKET_WIDTH = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bucket_of(turn_at: datetime) -> int:
    """The bucket a task whose turn is ``turn_at`` (UTC-aware) is counted in."""
    return (turn_at - _EPOCH) // BUCKET_WIDTH


def bucket_start(bucket: int) -> datetime:
    """The first moment counted in ``bucket``."""
    return _EPOCH + bucket * BUCKET_WIDTH


# The triggers as the latest migration (0015) leaves them; each migration that changed them
# keeps a frozen copy of its own.

_PG_BUCKET = "floor(extract(epoch FROM {row}.turn_at))::bigint"
# The stored text is 'YYYY-MM-DD HH:MM:SS.ffffff'; its fraction is cut off before parsing,
# as SQLite would round it to milliseconds (xx.9995 would count in the next second). A row
# inserted without ``turn_at`` counts at its ``created_at``, which ``task_default_turn``
# then writes into it.
_SQLITE_BUCKET = (
    "CAST(strftime('%s', substr(coalesce({row}.turn_at, {row}.created_at), 1, 19)) AS INTEGER)"
)
# A change of any of these moves a task between bucket rows (``turn_at`` changes only with
# ``status`` or ``waiting``: when the task comes back into the queue).
COUNTED_COLUMNS = "status, job_id, priority, waiting"

# --- PostgreSQL: one PL/pgSQL function behind three row triggers --------------------------

_OLD_BUCKET = _PG_BUCKET.format(row="OLD")
_NEW_BUCKET = _PG_BUCKET.format(row="NEW")
POSTGRESQL_FUNCTION = f"""
CREATE OR REPLACE FUNCTION taskhub_count_pending_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.status = 'pending' THEN
            UPDATE task_queue_bucket
               SET pending = pending - 1, waiting = waiting - OLD.waiting::integer
             WHERE job_id = OLD.job_id AND priority = OLD.priority
               AND bucket = {_OLD_BUCKET}
            RETURNING pending INTO remaining;
            IF remaining = 0 THEN
                DELETE FROM task_queue_bucket
                 WHERE job_id = OLD.job_id AND priority = OLD.priority
                   AND bucket = {_OLD_BUCKET} AND pending = 0;
            END IF;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.status = 'pending' THEN
            INSERT INTO task_queue_bucket AS counted
                (job_id, priority, bucket, pending, waiting)
            VALUES (NEW.job_id, NEW.priority, {_NEW_BUCKET}, 1, NEW.waiting::integer)
            ON CONFLICT (job_id, priority, bucket)
            DO UPDATE SET pending = counted.pending + 1,
                          waiting = counted.waiting + excluded.waiting;
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.limited THEN
            PERFORM taskhub_check_running_limits(NEW.job_id, NEW.submitted_by, NEW.room_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$"""

# The update trigger has no WHEN condition: PostgreSQL parses and prepares a trigger's WHEN
# afresh for every statement, which costs more than the function's early return for the
# two updates of a task that leave pending alone (claimed -> running -> completed).
POSTGRESQL_UPDATE_TRIGGER = f"""
CREATE TRIGGER task_queue_update
AFTER UPDATE OF {COUNTED_COLUMNS} ON task
FOR EACH ROW EXECUTE FUNCTION taskhub_count_pending_tasks()"""

# A row inserted without ``turn_at`` (by a writer older than migration 0015) takes its
# ``created_at``: FIFO. Only such inserts run the function.
POSTGRESQL_DEFAULT_TURN = (
    """
CREATE OR REPLACE FUNCTION taskhub_default_turn() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.turn_at := NEW.created_at;
    RETURN NEW;
END
$$""",
    """
CREATE TRIGGER task_default_turn BEFORE INSERT ON task FOR EACH ROW
WHEN (NEW.turn_at IS NULL) EXECUTE FUNCTION taskhub_default_turn()""",
)

# A claim of a task of a job with running limits (``rules.running_limits``): counted again
# under a per-job lock held to the claim's commit, so one claim of the job at a time gets
# here, and each counts what the others committed (every statement of a function sees a
# fresh snapshot); one that raced another past a limit is refused, and made again.
POSTGRESQL_LIMIT_CHECK = f"""
CREATE OR REPLACE FUNCTION taskhub_check_running_limits(
    checked_job uuid, submitter uuid, room varchar
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    per_submitter integer;
    per_room integer;
BEGIN
    PERFORM pg_advisory_xact_lock(8061, hashtext(checked_job::text));
    SELECT max_running_per_submitter, max_running_per_room INTO per_submitter, per_room
      FROM job WHERE id = checked_job;
    IF per_submitter < (SELECT count(*) FROM task WHERE job_id = checked_job
                          AND submitted_by = submitter AND status IN ('claimed', 'running')
                          AND limited)
       OR per_room < (SELECT count(*) FROM task WHERE job_id = checked_job
                        AND room_id = room AND status IN ('claimed', 'running') AND limited)
    THEN
        RAISE EXCEPTION 'a running limit of job % would be exceeded', checked_job
            USING ERRCODE = '{LIMIT_RACE_SQLSTATE}';
    END IF;
END
$$"""

# Whether a limited job's task fits within its job's running limits now (the claim's test
# of each candidate, ``store.running_limits.within_limits``): a function, opaque to the
# planner. As correlated subqueries in the claim's scan, the same test made every claim
# about a third slower on PostgreSQL, limited job or not (0.22 ms of 0.7 at 50,000 pending).
POSTGRESQL_WITHIN_LIMITS = """
CREATE OR REPLACE FUNCTION taskhub_within_limits(
    checked_job uuid, submitter uuid, room varchar
) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    per_submitter integer;
    per_room integer;
BEGIN
    SELECT max_running_per_submitter, max_running_per_room INTO per_submitter, per_room
      FROM job WHERE id = checked_job;
    RETURN (per_submitter IS NULL
            OR per_submitter > (SELECT count(*) FROM task WHERE job_id = checked_job
                                  AND submitted_by = submitter
                                  AND status IN ('claimed', 'running') AND limited))
       AND (per_room IS NULL
            OR per_room > (SELECT count(*) FROM task WHERE job_id = checked_job
                             AND room_id = room AND status IN ('claimed', 'running')
                             AND limited));
END
$$"""

POSTGRESQL_CREATE = (
    *POSTGRESQL_DEFAULT_TURN,
    POSTGRESQL_LIMIT_CHECK,
    POSTGRESQL_WITHIN_LIMITS,
    POSTGRESQL_FUNCTION,
    """
CREATE TRIGGER task_queue_insert AFTER INSERT ON task FOR EACH ROW
WHEN (NEW.status = 'pending') EXECUTE FUNCTION taskhub_count_pending_tasks()""",
    POSTGRESQL_UPDATE_TRIGGER,
    """
CREATE TRIGGER task_queue_delete AFTER DELETE ON task FOR EACH ROW
WHEN (OLD.status = 'pending') EXECUTE FUNCTION taskhub_count_pending_tasks()""",
)

# --- SQLite: one trigger per direction (SQLite triggers have no procedural branches) -------

_SQLITE_ENTER = f"""
    INSERT INTO task_queue_bucket (job_id, priority, bucket, pending, waiting)
    VALUES (NEW.job_id, NEW.priority, {_SQLITE_BUCKET.format(row="NEW")}, 1, NEW.waiting)
    ON CONFLICT (job_id, priority, bucket)
    DO UPDATE SET pending = pending + 1, waiting = waiting + excluded.waiting;"""
_SQLITE_LEAVE = f"""
    UPDATE task_queue_bucket SET pending = pending - 1, waiting = waiting - OLD.waiting
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_SQLITE_BUCKET.format(row="OLD")};
    DELETE FROM task_queue_bucket
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_SQLITE_BUCKET.format(row="OLD")} AND pending = 0;"""
_SQLITE_ON_UPDATE = f"AFTER UPDATE OF {COUNTED_COLUMNS} ON task"

SQLITE_CREATE = (
    """
CREATE TRIGGER task_default_turn AFTER INSERT ON task
WHEN NEW.turn_at IS NULL BEGIN
    UPDATE task SET turn_at = NEW.created_at WHERE id = NEW.id;
END""",
    f"""
CREATE TRIGGER task_queue_insert AFTER INSERT ON task
WHEN NEW.status = 'pending' BEGIN{_SQLITE_ENTER}
END""",
    f"""
CREATE TRIGGER task_queue_update_leave {_SQLITE_ON_UPDATE}
WHEN OLD.status = 'pending' BEGIN{_SQLITE_LEAVE}
END""",
    f"""
CREATE TRIGGER task_queue_update_enter {_SQLITE_ON_UPDATE}
WHEN NEW.status = 'pending' BEGIN{_SQLITE_ENTER}
END""",
    f"""
CREATE TRIGGER task_queue_delete AFTER DELETE ON task
WHEN OLD.status = 'pending' BEGIN{_SQLITE_LEAVE}
END""",
)


def install_current(connection: Any) -> None:
    """The triggers as the latest migration leaves them, on a (sync) connection with no
    pending task yet (for ``metadata.create_all``)."""
    postgres = connection.dialect.name == "postgresql"
    for statement in POSTGRESQL_CREATE if postgres else SQLITE_CREATE:
        connection.exec_driver_sql(statement)
