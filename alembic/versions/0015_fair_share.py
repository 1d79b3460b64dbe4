"""Fair sharing: a job's claim order and running limits, and the task's turn.

- ``job.claim_order``: ``fifo`` (the default, as before), ``fair-by-submitter`` or
  ``fair-by-room``.
- ``task.turn_at``: the task's place in its job's queue, which claims and queue positions
  order by (``priority`` first): its ``created_at`` in a FIFO job (and for every task
  already there), a turn among the other submitters' (or rooms') in a fair job.
  ``task.share_key``: whose share a fair job's task is counted in (NULL in a FIFO job);
  ``task.share_backlogged``: whether that share had tasks queued already at its submit.
- ``job.max_running_per_submitter`` and ``job.max_running_per_room``: at most this many of
  the job's tasks claimed or running at once per submitter / room (NULL: no limit);
  ``task.limited`` marks a limited job's tasks, ``ix_task_limited_active(_room)`` count them,
  and on PostgreSQL ``taskhub_within_limits`` tests a claim's candidate and
  ``taskhub_check_running_limits`` re-counts them after a claim.
- ``ix_task_claim_queue`` and ``ix_task_delayed`` order by ``turn_at`` instead of
  ``created_at``; ``ix_task_share_queue`` finds a share's last queued turn.
- The pending-count triggers bucket by the second of ``turn_at`` (equal to ``created_at``
  for every task already there, so the bucket rows stay as they are); ``task_default_turn``
  gives a row inserted without ``turn_at`` (by an older replica) its ``created_at``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)
QUEUED = "status = 'pending' AND NOT waiting"
WAITING = "status = 'pending' AND waiting"
ACTIVE = "status IN ('claimed', 'running')"


def _claim_queue(order: str) -> list[sa.TextClause | str]:
    columns = ["job_id", sa.text("priority DESC"), order, "id", "run_at", "status", "waiting"]
    return [*columns, "limited"] if order == "turn_at" else columns


def _delayed(order: str) -> list[str]:
    columns = ["job_id", "run_at", "priority", order, "id", "status", "waiting"]
    return [*columns, "limited"] if order == "turn_at" else columns


# --- Frozen copy of the pending-count triggers this revision installs (with ``turn_at``) and
# those it replaces (with ``created_at``, as 0011 left them): the SQL that
# ``app/store/queue_counts.py`` generated when this migration was written.

_PG_UPDATE_TRIGGER = """
CREATE TRIGGER task_queue_update
AFTER UPDATE OF {columns} ON task
FOR EACH ROW EXECUTE FUNCTION taskhub_count_pending_tasks()"""
_COUNTED_COLUMNS = {
    "turn_at": "status, job_id, priority, waiting",
    "created_at": "status, job_id, priority, created_at, waiting",
}

_PG_LIMIT_CHECK = """
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
            USING ERRCODE = 'TH001';
    END IF;
END
$$"""
_PG_WITHIN_LIMITS = """
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
_LIMIT_HOOK = """    IF TG_OP = 'UPDATE' THEN
        IF OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.limited THEN
            PERFORM taskhub_check_running_limits(NEW.job_id, NEW.submitted_by, NEW.room_id);
        END IF;
    END IF;
"""

_PG_DEFAULT_TURN = (
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
_PG_NO_DEFAULT_TURN = (
    "DROP TRIGGER task_default_turn ON task",
    "DROP FUNCTION taskhub_default_turn()",
)
_PG_NO_LIMIT_CHECK = (
    "DROP FUNCTION taskhub_check_running_limits(uuid, uuid, varchar)",
    "DROP FUNCTION taskhub_within_limits(uuid, uuid, varchar)",
)
_SQLITE_DEFAULT_TURN = """
CREATE TRIGGER task_default_turn AFTER INSERT ON task
WHEN NEW.turn_at IS NULL BEGIN
    UPDATE task SET turn_at = NEW.created_at WHERE id = NEW.id;
END"""


def _pg_bucket(row: str, order: str) -> str:
    return f"floor(extract(epoch FROM {row}.{order}))::bigint"


def _postgresql(order: str) -> tuple[str, ...]:
    function = f"""
CREATE OR REPLACE FUNCTION taskhub_count_pending_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining integer;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.status = 'pending' THEN
            UPDATE task_queue_bucket
               SET pending = pending - 1, waiting = waiting - OLD.waiting::integer
             WHERE job_id = OLD.job_id AND priority = OLD.priority
               AND bucket = {_pg_bucket("OLD", order)}
            RETURNING pending INTO remaining;
            IF remaining = 0 THEN
                DELETE FROM task_queue_bucket
                 WHERE job_id = OLD.job_id AND priority = OLD.priority
                   AND bucket = {_pg_bucket("OLD", order)} AND pending = 0;
            END IF;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.status = 'pending' THEN
            INSERT INTO task_queue_bucket AS counted
                (job_id, priority, bucket, pending, waiting)
            VALUES (NEW.job_id, NEW.priority, {_pg_bucket("NEW", order)}, 1, NEW.waiting::integer)
            ON CONFLICT (job_id, priority, bucket)
            DO UPDATE SET pending = counted.pending + 1,
                          waiting = counted.waiting + excluded.waiting;
        END IF;
    END IF;
{_LIMIT_HOOK if order == "turn_at" else ""}    RETURN NULL;
END
$$"""
    return (
        function,
        "DROP TRIGGER task_queue_update ON task",
        _PG_UPDATE_TRIGGER.format(columns=_COUNTED_COLUMNS[order]),
    )


def _sqlite_bucket(row: str, order: str) -> str:
    if order == "turn_at":
        return (
            f"CAST(strftime('%s', substr(coalesce({row}.turn_at, {row}.created_at), 1, 19))"
            " AS INTEGER)"
        )
    return f"CAST(strftime('%s', substr({row}.{order}, 1, 19)) AS INTEGER)"


def _sqlite(order: str) -> tuple[str, ...]:
    enter = f"""
    INSERT INTO task_queue_bucket (job_id, priority, bucket, pending, waiting)
    VALUES (NEW.job_id, NEW.priority, {_sqlite_bucket("NEW", order)}, 1, NEW.waiting)
    ON CONFLICT (job_id, priority, bucket)
    DO UPDATE SET pending = pending + 1, waiting = waiting + excluded.waiting;"""
    leave = f"""
    UPDATE task_queue_bucket SET pending = pending - 1, waiting = waiting - OLD.waiting
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_sqlite_bucket("OLD", order)};
    DELETE FROM task_queue_bucket
     WHERE job_id = OLD.job_id AND priority = OLD.priority
       AND bucket = {_sqlite_bucket("OLD", order)} AND pending = 0;"""
    on_update = f"AFTER UPDATE OF {_COUNTED_COLUMNS[order]} ON task"
    return (
        "DROP TRIGGER IF EXISTS task_queue_delete",
        "DROP TRIGGER IF EXISTS task_queue_update_enter",
        "DROP TRIGGER IF EXISTS task_queue_update_leave",
        "DROP TRIGGER IF EXISTS task_queue_insert",
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


def _partial(where: str) -> dict[str, sa.TextClause]:
    return {f"{dialect}_where": sa.text(where) for dialect in ("sqlite", "postgresql")}


def _order_by(order: str) -> None:
    """The queue's indexes and triggers ordered by ``order`` (``turn_at`` or ``created_at``).
    ``task``'s triggers are replaced first: on PostgreSQL that locks ``task`` against writes
    until the transaction ends."""
    connection = op.get_bind()
    postgres = connection.dialect.name == "postgresql"
    turn = order == "turn_at"
    if postgres:
        statements = (
            *((_PG_LIMIT_CHECK, _PG_WITHIN_LIMITS) if turn else ()),
            *_postgresql(order),
            *(_PG_DEFAULT_TURN if turn else (*_PG_NO_DEFAULT_TURN, *_PG_NO_LIMIT_CHECK)),
        )
    else:
        statements = (
            "DROP TRIGGER IF EXISTS task_default_turn",
            *_sqlite(order),
            *((_SQLITE_DEFAULT_TURN,) if turn else ()),
        )
    for statement in statements:
        connection.exec_driver_sql(statement)
    for name in ("ix_task_claim_queue", "ix_task_delayed"):
        op.drop_index(name, table_name="task")
    op.create_index("ix_task_claim_queue", "task", _claim_queue(order), **_partial(QUEUED))
    op.create_index("ix_task_delayed", "task", _delayed(order), **_partial(WAITING))


def upgrade() -> None:
    op.add_column(
        "job",
        sa.Column(
            "claim_order", sa.String(length=32), nullable=False, server_default=sa.text("'fifo'")
        ),
    )
    op.add_column("job", sa.Column("max_running_per_submitter", sa.Integer(), nullable=True))
    op.add_column("job", sa.Column("max_running_per_room", sa.Integer(), nullable=True))
    op.add_column("task", sa.Column("turn_at", Timestamp, nullable=True))
    op.add_column("task", sa.Column("share_key", sa.String(length=128), nullable=True))
    for flag in ("share_backlogged", "limited"):
        column = sa.Column(flag, sa.Boolean(), nullable=False, server_default=sa.false())
        op.add_column("task", column)
    op.execute("UPDATE task SET turn_at = created_at")
    _order_by("turn_at")
    op.create_index(
        "ix_task_share_queue",
        "task",
        ["job_id", "share_key", "priority", "turn_at"],
        **_partial(f"{QUEUED} AND share_key IS NOT NULL"),
    )
    for name, share in (
        ("ix_task_limited_active", "submitted_by"),
        ("ix_task_limited_active_room", "room_id"),
    ):
        columns = ["job_id", share, "status"]
        op.create_index(name, "task", columns, **_partial(f"{ACTIVE} AND limited"))


def downgrade() -> None:
    op.drop_index("ix_task_limited_active_room", table_name="task")
    op.drop_index("ix_task_limited_active", table_name="task")
    op.drop_index("ix_task_share_queue", table_name="task")
    _order_by("created_at")
    op.drop_column("task", "limited")
    op.drop_column("task", "share_backlogged")
    op.drop_column("task", "share_key")
    op.drop_column("task", "turn_at")
    op.drop_column("job", "max_running_per_room")
    op.drop_column("job", "max_running_per_submitter")
    op.drop_column("job", "claim_order")
