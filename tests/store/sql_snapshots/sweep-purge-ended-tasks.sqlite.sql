-- sweep-purge-ended-tasks (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 completed_at_1 = '2026-03-14 12:00:00.250000+00:00'
--   2 status_1 = ['cancelled', 'completed', 'failed']
--   3 param_1 = 1000
--   4 param_2 = 0
DELETE FROM task WHERE task.id IN (SELECT task.id
FROM task
WHERE task.completed_at < ? AND task.status IN (__[POSTCOMPILE_status_1]) ORDER BY task.completed_at
 LIMIT ? OFFSET ?)
