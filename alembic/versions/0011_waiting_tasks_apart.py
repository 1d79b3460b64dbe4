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
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "status = 'pending'"
CLAIM_QUEUE = ["job_id", sa.text("priority DESC"), "created_at", "id", "run_at", "status"]
DELAYED = ["job_id", "run_at", "priority", "created_at", "id"]


# --- Frozen copies of what this revision used from the application -------------------------
#
# The pending-count triggers as this revision replaces them (and, for the downgrade, as 0007
# left them): the SQL that ``app/persistence/queue_counts.py`` generated when this migration
# was written (commit 8ddbb73), and its ``UTCDateTime`` bind behaviour, copied here so that
# later changes to the application cannot change what this migration does.


class _UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime as ``task.run_at`` stores it: naive UTC on SQLite,
    aware on PostgreSQL (``timestamp with time zone``)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use UTC-aware ones")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value


# PostgreSQL: one PL/pgSQL function behind three row triggers; the update trigger has no
# WHEN condition since 0007.

_PG_UPDATE_TRIGGER = """
CREATE TRIGGER task_queue_update AFTER UPDATE OF {columns} ON task
FOR EACH ROW {when}EXECUTE FUNCTION taskhub_count_pending_tasks()"""
_COUNTED_COLUMNS = "status, job_id, priority, created_at"

_PG_BUCKET = "floor(extract(epoch FROM {row}.created_at))::bigint"


def _waiting_terms(waiting: bool, *, cast: str = "", counted: str = "") -> dict[str, str]:
    """What the triggers add to count the waiting tasks too (nothing without ``waiting``):
    ``cast`` turns the flag into an integer, ``counted`` names the bucket row of an
    ``ON CONFLICT`` update."""
    if not waiting:
        return dict.fromkeys(("columns", "values", "enter", "leave"), "")
    return {
        "columns": ", waiting",
        "values": f", NEW.waiting{cast}",
        "enter": f", waiting = {counted}waiting + excluded.waiting",
        "leave": f", waiting = waiting - OLD.waiting{cast}",
    }


def _postgresql_function(*, waiting: bool) -> str:
    """The counting function; ``waiting``: also count the waiting tasks."""
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


# The function also counts the waiting tasks, and the update trigger also fires when
# ``waiting`` changes (the announcer queues a task that came due).
POSTGRESQL_COUNT_WAITING = (
    _postgresql_function(waiting=True),
    "DROP TRIGGER task_queue_update ON task",
    _PG_UPDATE_TRIGGER.format(columns=f"{_COUNTED_COLUMNS}, waiting", when=""),
)
# Downgrade: the function and the update trigger as 0007 left them.
POSTGRESQL_COUNT_PENDING_ONLY = (
    _postgresql_function(waiting=False),
    "DROP TRIGGER task_queue_update ON task",
    _PG_UPDATE_TRIGGER.format(columns=_COUNTED_COLUMNS, when=""),
)

# SQLite: one trigger per direction (SQLite triggers have no procedural branches).

# The stored text is 'YYYY-MM-DD HH:MM:SS.ffffff'; its fraction is cut off before parsing,
# as SQLite would round it to milliseconds (xx.9995 would count in the next second).
_SQLITE_BUCKET = "CAST(strftime('%s', substr({row}.created_at, 1, 19)) AS INTEGER)"


def _sqlite_triggers(*, waiting: bool) -> tuple[str, ...]:
    """The four triggers; ``waiting``: also count the waiting tasks."""
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


def _count_waiting(count: bool = True) -> None:
    """The triggers also count the waiting tasks (``count=False`` undoes it), and every
    bucket row is counted afresh from the tasks (``task``'s triggers are replaced first: on
    PostgreSQL that locks ``task`` against writes until the transaction ends, so nothing
    slips between the count and the triggers)."""
    connection = op.get_bind()
    postgres = connection.dialect.name == "postgresql"
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
        "task", sa.column("status"), sa.column("run_at", _UTCDateTime), sa.column("waiting")
    )
    now = datetime.now(UTC)
    op.get_bind().execute(
        sa.update(task)
        .where(task.c.status == "pending", task.c.run_at > sa.bindparam("now", now, _UTCDateTime))
        .values(waiting=sa.true())
    )
    _indexes(waiting=True)
    _count_waiting()


def downgrade() -> None:
    _count_waiting(count=False)
    _indexes(waiting=False)
    op.drop_column("task_queue_bucket", "waiting")
    op.drop_column("task", "waiting")
