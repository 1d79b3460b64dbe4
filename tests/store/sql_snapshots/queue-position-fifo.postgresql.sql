-- queue-position-fifo (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 job_id
--   2 priority
--   3 coalesce_1 = 0
--   4 bucket
--   5 coalesce_2 = 0
--   6 bucket_end
--   7 turn_at
--   8 task_id
--   9 now
SELECT coalesce((SELECT sum(task_queue_bucket.pending - task_queue_bucket.waiting) AS sum_1
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = $1::UUID AND task_queue_bucket.priority > $2::INTEGER), $3::INTEGER) + (coalesce((SELECT sum(task_queue_bucket.pending - task_queue_bucket.waiting) AS sum_2
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = $1::UUID AND task_queue_bucket.priority = $2::INTEGER AND task_queue_bucket.bucket <= $4::BIGINT), $5::INTEGER) - (SELECT count(*) AS count_1
FROM task
WHERE task.job_id = $1::UUID AND task.status = 'pending' AND NOT task.waiting AND task.priority = $2::INTEGER AND task.turn_at < $6::TIMESTAMP WITH TIME ZONE AND (task.turn_at, task.id) > ($7::TIMESTAMP WITH TIME ZONE, $8::UUID))) + (SELECT count(*) AS count_2
FROM task
WHERE task.job_id = $1::UUID AND task.status = 'pending' AND task.waiting AND task.run_at <= $9::TIMESTAMP WITH TIME ZONE AND (task.priority > $2::INTEGER OR task.priority = $2::INTEGER AND (task.turn_at, task.id) <= ($7::TIMESTAMP WITH TIME ZONE, $8::UUID))) AS anon_1
