-- queue-position-delayed (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 job_id
--   2 coalesce_1 = 0
--   3 job_id
--   4 run_at
--   5 run_at
--   6 run_at
--   7 priority
--   8 priority
--   9 turn_at
--   10 task_id
SELECT coalesce((SELECT sum(task_queue_bucket.pending) AS sum_1
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = ?), ?) - (SELECT count(*) AS count_1
FROM task
WHERE task.job_id = ? AND task.status = 'pending' AND task.waiting AND task.run_at >= ? AND (task.run_at > ? OR task.run_at = ? AND (task.priority < ? OR task.priority = ? AND (task.turn_at, task.id) > (?, ?)))) AS anon_1
