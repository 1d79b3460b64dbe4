"""What each user's tasks hold across the hub, kept by the database: ``user_usage`` has one
row per user who submitted, with their unfinished tasks (pending, claimed or running), those
of them of a costly job (``job.costly``: its run validates a payload, ``ValidatePayload``),
and the bytes of their tasks' payloads, results and log lines (message and logger).

Triggers on ``task`` and ``task_log`` keep it in the transaction of every write that changes
it, whichever code path (or bulk load) makes it: a submit (insert), the end of a task (its
status, and its result written with it), a log append or trim, a retention purge (delete).
A submit then reads the user's row in its own insert (``store.user_usage.within_quota``),
instead of counting the user's tasks. A claim leaves the row alone: pending, claimed and
running are all unfinished.

Bytes are those of the stored text (UTF-8): the JSON text of a payload or result as the hub
wrote it, a log line's message and logger, the same on both engines. PostgreSQL measures a
document when its row is written and when it is deleted; a purged document compressed in
storage is decompressed to be measured (a few ms a MB of the sweeper's time).

Changing a trigger takes a new migration (the migrations test compares the triggers the
models install with the migrated ones); SQLite drops a table's triggers when a batch
migration rebuilds the table, so a later migration that rebuilds ``task`` or ``task_log``
must create them again.
"""

from __future__ import annotations

from typing import Any

_UNFINISHED = "status NOT IN ('completed', 'failed', 'cancelled')"
# A result of JSON null (what a claim writes, clearing an earlier attempt's) counts nothing:
# a claim leaves the figures alone.
_PG_RESULT_BYTES = "coalesce(octet_length(nullif({row}.result::text, 'null')), 0)"

# --- PostgreSQL: one row-trigger function on ``task``, two statement triggers on logs -----

POSTGRESQL_TASK_FUNCTION = f"""
CREATE OR REPLACE FUNCTION taskhub_count_user_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    owner uuid;
    of_job uuid;
    tasks integer := 0;
    costly integer := 0;
    bytes bigint := 0;
BEGIN
    IF TG_OP = 'INSERT' THEN
        owner := NEW.submitted_by;
        IF owner IS NULL THEN
            RETURN NULL;
        END IF;
        IF NEW.{_UNFINISHED} THEN
            tasks := 1;
            SELECT job.costly::integer INTO costly FROM job WHERE job.id = NEW.job_id;
        END IF;
        bytes := octet_length(NEW.payload::text) + {_PG_RESULT_BYTES.format(row="NEW")};
        INSERT INTO user_usage AS used
            (user_id, unfinished_tasks, unfinished_costly_tasks, stored_bytes)
        VALUES (owner, tasks, coalesce(costly, 0), bytes)
        ON CONFLICT (user_id) DO UPDATE
        SET unfinished_tasks = used.unfinished_tasks + excluded.unfinished_tasks,
            unfinished_costly_tasks = used.unfinished_costly_tasks
                                      + excluded.unfinished_costly_tasks,
            stored_bytes = used.stored_bytes + excluded.stored_bytes;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        owner := NEW.submitted_by;
        IF owner IS NULL THEN
            RETURN NULL;
        END IF;
        of_job := NEW.job_id;
        tasks := (NEW.{_UNFINISHED})::integer - (OLD.{_UNFINISHED})::integer;
        IF OLD.result IS NOT NULL OR NEW.result IS NOT NULL THEN
            bytes := {_PG_RESULT_BYTES.format(row="NEW")} - {_PG_RESULT_BYTES.format(row="OLD")};
        END IF;
        IF tasks = 0 AND bytes = 0 THEN
            RETURN NULL;
        END IF;
    ELSE
        owner := OLD.submitted_by;
        IF owner IS NULL THEN
            RETURN OLD;
        END IF;
        of_job := OLD.job_id;
        tasks := -(OLD.{_UNFINISHED})::integer;
        bytes := -octet_length(OLD.payload::text) - {_PG_RESULT_BYTES.format(row="OLD")}
                 - coalesce((SELECT sum(octet_length(task_log.message)
                                        + coalesce(octet_length(task_log.logger), 0))
                               FROM task_log WHERE task_log.task_id = OLD.id), 0);
    END IF;
    UPDATE user_usage AS used
       SET unfinished_tasks = used.unfinished_tasks + tasks,
           unfinished_costly_tasks = used.unfinished_costly_tasks + CASE
               WHEN tasks = 0 OR (tasks < 0 AND used.unfinished_costly_tasks = 0) THEN 0
               ELSE tasks * coalesce((SELECT job.costly::integer FROM job
                                       WHERE job.id = of_job), 0)
           END,
           stored_bytes = used.stored_bytes + bytes
     WHERE used.user_id = owner;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NULL;
END
$$"""

# The log lines a statement added or removed, per submitter of their tasks. A task's lines
# that go with it (the foreign key's cascade) are no longer joined to it: its delete
# trigger counted them off already.
_LOG_BYTES = """
    UPDATE user_usage AS used
       SET stored_bytes = used.stored_bytes {sign} lines.bytes
      FROM (SELECT task.submitted_by,
                   sum(octet_length({rows}.message) + coalesce(octet_length({rows}.logger), 0))
                       AS bytes
              FROM {rows} JOIN task ON task.id = {rows}.task_id
             GROUP BY task.submitted_by) AS lines
     WHERE used.user_id = lines.submitted_by;"""

POSTGRESQL_LOG_FUNCTIONS = tuple(
    f"""
CREATE OR REPLACE FUNCTION taskhub_log_usage_{rows}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN{_LOG_BYTES.format(sign=sign, rows=rows)}
    RETURN NULL;
END
$$"""
    for rows, sign in (("added", "+"), ("removed", "-"))
)

# No WHEN conditions (PostgreSQL prepares a trigger's WHEN afresh for every statement): the
# function returns at once for what leaves the figures alone (a claim, a start).
POSTGRESQL_CREATE = (
    POSTGRESQL_TASK_FUNCTION,
    *POSTGRESQL_LOG_FUNCTIONS,
    """
CREATE TRIGGER task_usage_insert AFTER INSERT ON task
FOR EACH ROW EXECUTE FUNCTION taskhub_count_user_usage()""",
    """
CREATE TRIGGER task_usage_update AFTER UPDATE OF status, result ON task
FOR EACH ROW EXECUTE FUNCTION taskhub_count_user_usage()""",
    # Before: its log lines are still there to be counted off (the cascade comes after).
    """
CREATE TRIGGER task_usage_delete BEFORE DELETE ON task
FOR EACH ROW EXECUTE FUNCTION taskhub_count_user_usage()""",
    """
CREATE TRIGGER task_log_usage_insert AFTER INSERT ON task_log
REFERENCING NEW TABLE AS added
FOR EACH STATEMENT EXECUTE FUNCTION taskhub_log_usage_added()""",
    """
CREATE TRIGGER task_log_usage_delete AFTER DELETE ON task_log
REFERENCING OLD TABLE AS removed
FOR EACH STATEMENT EXECUTE FUNCTION taskhub_log_usage_removed()""",
)

# --- SQLite: row triggers (SQLite has no statement triggers) -------------------------------

_SQLITE_BYTES = "coalesce(length(CAST({} AS BLOB)), 0)"
_SQLITE_RESULT_BYTES = "coalesce(length(CAST(nullif({row}.result, 'null') AS BLOB)), 0)"
_SQLITE_LINE_BYTES = (
    f"({_SQLITE_BYTES.format('{row}.message')} + {_SQLITE_BYTES.format('{row}.logger')})"
)
_SQLITE_COSTLY = "coalesce((SELECT costly FROM job WHERE id = {row}.job_id), 0)"
# How many unfinished tasks a change adds (-1, 0 or 1).
_SQLITE_TASKS_DELTA = f"(NEW.{_UNFINISHED}) - (OLD.{_UNFINISHED})"

SQLITE_CREATE = (
    f"""
CREATE TRIGGER task_usage_insert AFTER INSERT ON task
WHEN NEW.submitted_by IS NOT NULL BEGIN
    INSERT INTO user_usage (user_id, unfinished_tasks, unfinished_costly_tasks, stored_bytes)
    VALUES (
        NEW.submitted_by,
        NEW.{_UNFINISHED},
        NEW.{_UNFINISHED} AND {_SQLITE_COSTLY.format(row="NEW")},
        {_SQLITE_BYTES.format("NEW.payload")} + {_SQLITE_RESULT_BYTES.format(row="NEW")}
    )
    ON CONFLICT (user_id) DO UPDATE
    SET unfinished_tasks = unfinished_tasks + excluded.unfinished_tasks,
        unfinished_costly_tasks = unfinished_costly_tasks + excluded.unfinished_costly_tasks,
        stored_bytes = stored_bytes + excluded.stored_bytes;
END""",
    f"""
CREATE TRIGGER task_usage_update AFTER UPDATE OF status, result ON task
WHEN NEW.submitted_by IS NOT NULL
 AND ((NEW.{_UNFINISHED}) <> (OLD.{_UNFINISHED})
      OR nullif(NEW.result, 'null') IS NOT nullif(OLD.result, 'null')) BEGIN
    UPDATE user_usage
       SET unfinished_tasks = unfinished_tasks + {_SQLITE_TASKS_DELTA},
           unfinished_costly_tasks = unfinished_costly_tasks + CASE
               WHEN {_SQLITE_TASKS_DELTA} = 0
                 OR ({_SQLITE_TASKS_DELTA} < 0 AND unfinished_costly_tasks = 0) THEN 0
               ELSE ({_SQLITE_TASKS_DELTA}) * {_SQLITE_COSTLY.format(row="NEW")}
           END,
           stored_bytes = stored_bytes + {_SQLITE_RESULT_BYTES.format(row="NEW")}
                          - {_SQLITE_RESULT_BYTES.format(row="OLD")}
     WHERE user_id = NEW.submitted_by;
END""",
    f"""
CREATE TRIGGER task_usage_delete BEFORE DELETE ON task
WHEN OLD.submitted_by IS NOT NULL BEGIN
    UPDATE user_usage
       SET unfinished_tasks = unfinished_tasks - (OLD.{_UNFINISHED}),
           unfinished_costly_tasks = unfinished_costly_tasks - CASE
               WHEN NOT (OLD.{_UNFINISHED}) OR unfinished_costly_tasks = 0 THEN 0
               ELSE {_SQLITE_COSTLY.format(row="OLD")}
           END,
           stored_bytes = stored_bytes - {_SQLITE_BYTES.format("OLD.payload")}
                          - {_SQLITE_RESULT_BYTES.format(row="OLD")}
                          - coalesce((SELECT sum({_SQLITE_LINE_BYTES.format(row="task_log")})
                                        FROM task_log WHERE task_id = OLD.id), 0)
     WHERE user_id = OLD.submitted_by;
END""",
    f"""
CREATE TRIGGER task_log_usage_insert AFTER INSERT ON task_log BEGIN
    UPDATE user_usage SET stored_bytes = stored_bytes + {_SQLITE_LINE_BYTES.format(row="NEW")}
     WHERE user_id = (SELECT submitted_by FROM task WHERE id = NEW.task_id);
END""",
    f"""
CREATE TRIGGER task_log_usage_delete AFTER DELETE ON task_log BEGIN
    UPDATE user_usage SET stored_bytes = stored_bytes - {_SQLITE_LINE_BYTES.format(row="OLD")}
     WHERE user_id = (SELECT submitted_by FROM task WHERE id = OLD.task_id);
END""",
)


def install_current(connection: Any) -> None:
    """The triggers as the latest migration leaves them, on a (sync) connection with no
    task yet (for ``metadata.create_all``)."""
    postgres = connection.dialect.name == "postgresql"
    for statement in POSTGRESQL_CREATE if postgres else SQLITE_CREATE:
        connection.exec_driver_sql(statement)
