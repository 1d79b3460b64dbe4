-- announcer-next-due (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 after
SELECT min(task.run_at) AS min_1
FROM task
WHERE task.status = 'pending' AND task.run_at IS NOT NULL AND task.run_at > ?
