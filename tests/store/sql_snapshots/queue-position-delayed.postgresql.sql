-- queue-position-delayed (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 job_id
--   2 coalesce_1 = 0
--   3 run_at
--   4 priority
--   5 turn_at
--   6 task_id
SELECT coalesce((SELECT sum(task_queue_bucket.pending) AS sum_1
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = $1::UUID), $2::INTEGER) - (SELECT count(*) AS count_1
FROM task
WHERE task.job_id = $1::UUID AND task.status = 'pending' AND task.waiting AND task.run_at >= $3::TIMESTAMP WITH TIME ZONE AND (task.run_at > $3::TIMESTAMP WITH TIME ZONE OR task.run_at = $3::TIMESTAMP WITH TIME ZONE AND (task.priority < $4::INTEGER OR task.priority = $4::INTEGER AND (task.turn_at, task.id) > ($5::TIMESTAMP WITH TIME ZONE, $6::UUID)))) AS anon_1
