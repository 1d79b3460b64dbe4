"""Pending-task counts per (job, priority, second of submission), kept by the database.

A pending task's ``queue_position`` is a rank: how many pending tasks of its job come before
it. Counting them index entry by index entry grows with the queue (~7 ms at 50,000 here).
Instead, triggers on ``task`` keep ``task_queue_bucket``: the number of pending tasks per
job, priority and whole second of ``created_at``, and of those the ones ``waiting`` for
their ``run_at`` (since migration 0011) — exact after every insert, status change and
delete, whichever code path (or bulk load, or old replica) makes it. A rank is then a
sum over the buckets (one row per busy second) and a count inside the task's own second,
from its nearer end (see ``app/store/queue_positions.py``).

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
CREATE TRIGGER task_queue_update AFTER UPDATE OF {columns} ON task
FOR EACH ROW {when}EXECUTE FUNCTION taskhub_count_pending_tasks()"""
_COUNTED_COLUMNS = "status, job_id, priority, created_at"

_PG_BUCKET = "floor(extract(epoch FROM {row}.created_at))::bigint"


def _waiting_terms(waiting: bool, *, cast: str = "", counted: str = "") -> dict[str, str]:
    """What the triggers add to count the waiting tasks too (migration 0011; nothing without
    ``waiting``): ``cast`` turns the flag into an integer, ``counted`` names the bucket row
    of an ``ON CONFLICT`` update."""
    if not waiting:
        return dict.fromkeys(("columns", "values", "enter", "leave"), "")
    return {
        "columns": ", waiting",
        "values": f", NEW.waiting{cast}",
        "enter": f", waiting = {counted}waiting + excluded.waiting",
        "leave": f", waiting = waiting - OLD.waiting{cast}",
    }


def _postgresql_function(*, waiting: bool) -> str:
    """The counting function; ``waiting`` (migration 0011): also count the waiting tasks."""
    terms = _waiting_terms(waiting, cast="::integer", counted="counted.")
    return f"""
CREATE OR REPLACE FUNCTION taskhub_count_pending_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.status = 'pending' THEN
            UPDATE task_queue_bucket SET pending = pending - 1{terms["leave"]}
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
            INSERT INTO task_queue_bucket AS counted
                (job_id, priority, bucket, pending{terms["columns"]})
            VALUES (NEW.job_id, NEW.priority, {_PG_BUCKET.format(row="NEW")}, 1{terms["values"]})
            ON CONFLICT (job_id, priority, bucket)
            DO UPDATE SET pending = counted.pending + 1{terms["enter"]};
        END IF;
    END IF;
    RETURN NULL;
END
$$"""


POSTGRESQL_CREATE = (
    _postgresql_function(waiting=False),
    """
CREATE TRIGGER task_queue_insert AFTER INSERT ON task FOR EACH ROW
WHEN (NEW.status = 'pending') EXECUTE FUNCTION taskhub_count_pending_tasks()""",
    _PG_UPDATE_TRIGGER.format(
        columns=_COUNTED_COLUMNS,
        when="WHEN (OLD.status = 'pending' OR NEW.status = 'pending')\n",
    ),
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
    _PG_UPDATE_TRIGGER.format(columns=_COUNTED_COLUMNS, when=""),
)
POSTGRESQL_UPDATE_CONDITIONAL = ("DROP TRIGGER task_queue_update ON task", POSTGRESQL_CREATE[2])

# Migration 0011: the function also counts the waiting tasks, and the update trigger also
# fires when ``waiting`` changes (the announcer queues a task that came due).
POSTGRESQL_COUNT_WAITING = (
    _postgresql_function(waiting=True),
    "DROP TRIGGER task_queue_update ON task",
    _PG_UPDATE_TRIGGER.format(columns=f"{_COUNTED_COLUMNS}, waiting", when=""),
)
POSTGRESQL_COUNT_PENDING_ONLY = (
    _postgresql_function(waiting=False),
    *POSTGRESQL_UPDATE_UNCONDITIONAL,
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


def _sqlite_triggers(*, waiting: bool) -> tuple[str, ...]:
    """The four triggers; ``waiting`` (migration 0011): also count the waiting tasks."""
    terms = _waiting_terms(waiting)
    enter = f"""
    INSERT INTO task_queue_bucket (job_id, priority, bucket, pending{terms["columns"]})
    VALUES (NEW.job_id, NEW.priority, {_SQLITE_BUCKET.format(row="NEW")}, 1{terms["values"]})
    ON CONFLICT (job_id, priority, bucket) DO UPDATE SET pending = pending + 1{terms["enter"]};"""
    leave = f"""
    UPDATE task_queue_bucket SET pending = pending - 1{terms["leave"]}
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_SQLITE_BUCKET.format(row="OLD")};
    DELETE FROM task_queue_bucket
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_SQLITE_BUCKET.format(row="OLD")} AND pending = 0;"""
    columns = f"{_COUNTED_COLUMNS}, waiting" if waiting else _COUNTED_COLUMNS
    on_update = f"AFTER UPDATE OF {columns} ON task"
    return (
        f"""
CREATE TRIGGER task_queue_insert AFTER INSERT ON task
WHEN NEW.status = 'pending' BEGIN{enter}
END""",
        f"""
CREATE TRIGGER task_queue_update_leave {on_update}
WHEN OLD.status = 'pending' BEGIN{leave}
END""",
        f"""
CREATE TRIGGER task_queue_update_enter {on_update}
WHEN NEW.status = 'pending' BEGIN{enter}
END""",
        f"""
CREATE TRIGGER task_queue_delete AFTER DELETE ON task
WHEN OLD.status = 'pending' BEGIN{leave}
END""",
    )


SQLITE_CREATE = _sqlite_triggers(waiting=False)

SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS task_queue_delete",
    "DROP TRIGGER IF EXISTS task_queue_update_enter",
    "DROP TRIGGER IF EXISTS task_queue_update_leave",
    "DROP TRIGGER IF EXISTS task_queue_insert",
)

_BACKFILL = """
INSERT INTO task_queue_bucket (job_id, priority, bucket, pending{waiting_column})
SELECT job_id, priority, {bucket}, count(*){waiting_count} FROM task WHERE status = 'pending'
GROUP BY job_id, priority, {bucket}"""


def _backfill(bucket: str, *, waiting: bool) -> str:
    return _BACKFILL.format(
        bucket=bucket,
        waiting_column=", waiting" if waiting else "",
        waiting_count=", sum(CASE WHEN waiting THEN 1 ELSE 0 END)" if waiting else "",
    )


POSTGRESQL_BACKFILL = _backfill(_PG_BUCKET.format(row="task"), waiting=False)
SQLITE_BACKFILL = _backfill(_SQLITE_BUCKET.format(row="task"), waiting=False)


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


def count_waiting(connection: Any, count: bool = True) -> None:
    """Migration 0011's change (``count=False`` undoes it): the triggers also count the
    waiting tasks, and every bucket row is counted afresh from the tasks (``task``'s
    triggers are replaced first: on PostgreSQL that locks ``task`` against writes until the
    transaction ends, so nothing slips between the count and the triggers)."""
    postgres = connection.dialect.name == "postgresql"
    statements: tuple[str, ...]
    if postgres:
        statements = POSTGRESQL_COUNT_WAITING if count else POSTGRESQL_COUNT_PENDING_ONLY
    else:
        statements = (*SQLITE_DROP, *_sqlite_triggers(waiting=count))
    for statement in statements:
        connection.exec_driver_sql(statement)
    if count:
        connection.exec_driver_sql("DELETE FROM task_queue_bucket")
        bucket = _PG_BUCKET if postgres else _SQLITE_BUCKET
        connection.exec_driver_sql(_backfill(bucket.format(row="task"), waiting=True))


def install_current(connection: Any) -> None:
    """The triggers as the latest migration leaves them (for ``metadata.create_all``)."""
    install(connection)
    make_update_trigger_unconditional(connection)
    count_waiting(connection)


def uninstall(connection: Any) -> None:
    postgres = connection.dialect.name == "postgresql"
    for statement in POSTGRESQL_DROP if postgres else SQLITE_DROP:
        connection.exec_driver_sql(statement)
