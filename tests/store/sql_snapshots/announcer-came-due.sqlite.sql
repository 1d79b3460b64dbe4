-- announcer-came-due (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 after
--   2 after
--   3 after_id
--   4 until
--   5 limit
--   6 param_1 = 0
SELECT task.id, task.room_id, task.run_at, job.room_id AS job_room, job.category, job.name
FROM task JOIN job ON job.id = task.job_id
WHERE task.status = 'pending' AND task.run_at IS NOT NULL AND (task.run_at > ? OR task.run_at = ? AND task.id > ?) AND task.run_at <= ? ORDER BY task.run_at, task.id
 LIMIT ? OFFSET ?
