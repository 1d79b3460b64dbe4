-- task-update-attempt (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 b_task_id
SELECT task.attempt, task.max_attempts
FROM task
WHERE task.id = ?
