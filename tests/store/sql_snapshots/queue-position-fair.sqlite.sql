-- queue-position-fair (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 job_id
--   2 priority
--   3 coalesce_1 = 0
--   4 job_id
--   5 priority
--   6 bucket
--   7 coalesce_2 = 0
--   8 job_id
--   9 priority
--   10 bucket_start
--   11 turn_at
--   12 task_id
--   13 job_id
--   14 now
--   15 priority
--   16 priority
--   17 turn_at
--   18 task_id
SELECT coalesce((SELECT sum(task_queue_bucket.pending - task_queue_bucket.waiting) AS sum_1
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = ? AND task_queue_bucket.priority > ?), ?) + coalesce((SELECT sum(task_queue_bucket.pending - task_queue_bucket.waiting) AS sum_2
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = ? AND task_queue_bucket.priority = ? AND task_queue_bucket.bucket < ?), ?) + (SELECT count(*) AS count_1
FROM task
WHERE task.job_id = ? AND task.status = 'pending' AND NOT task.waiting AND task.priority = ? AND task.turn_at >= ? AND (task.turn_at, task.id) <= (?, ?)) + (SELECT count(*) AS count_2
FROM task
WHERE task.job_id = ? AND task.status = 'pending' AND task.waiting AND task.run_at <= ? AND (task.priority > ? OR task.priority = ? AND (task.turn_at, task.id) <= (?, ?))) AS anon_1
