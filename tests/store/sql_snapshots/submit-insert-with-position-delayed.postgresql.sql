-- submit-insert-with-position-delayed (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 b_id
--   2 b_room_id
--   3 param_2 = 'pending'
--   4 b_payload
--   5 b_created_at
--   6 b_submitted_by
--   7 b_attempt
--   8 b_key
--   9 b_priority
--   10 b_max_attempts
--   11 b_run_at
--   12 b_waiting
--   13 param_3 = 1
--   14 b_digest
--   15 b_rerun_of
--   16 b_turn_at
--   17 b_share_key
--   18 b_share_backlogged
--   19 b_job_id
--   20 b_job_version
--   21 job_id
--   22 coalesce_1 = 0
--   23 run_at
--   24 priority
--   25 turn_at
--   26 task_id
--   27 param_1 = 1
WITH inserted AS
(INSERT INTO task (id, job_id, room_id, status, payload, created_at, submitted_by, attempt, idempotency_key, priority, max_attempts, run_at, waiting, version, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited) SELECT $1::UUID AS anon_1, job.id AS id, $2::VARCHAR AS anon_2, $3::VARCHAR AS anon_3, $4::JSON AS anon_4, $5::TIMESTAMP WITH TIME ZONE AS anon_5, $6::UUID AS anon_6, $7::INTEGER AS anon_7, $8::VARCHAR AS anon_8, $9::INTEGER AS anon_9, coalesce($10::INTEGER, job.max_attempts) AS coalesce_2, $11::TIMESTAMP WITH TIME ZONE AS anon_10, $12::BOOLEAN AS anon_11, $13::INTEGER AS anon_12, $14::VARCHAR AS anon_13, $15::UUID AS anon_14, $16::TIMESTAMP WITH TIME ZONE AS anon_15, $17::VARCHAR AS anon_16, $18::BOOLEAN AS anon_17, job.max_running_per_submitter IS NOT NULL OR job.max_running_per_room IS NOT NULL AS anon_18
FROM job
WHERE job.id = $19::UUID AND job.updated_at = $20::TIMESTAMP WITH TIME ZONE AND job.deleted IS false FOR KEY SHARE OF job ON CONFLICT DO NOTHING RETURNING task.max_attempts)
 SELECT inserted.max_attempts, (coalesce((SELECT sum(task_queue_bucket.pending) AS sum_1
FROM task_queue_bucket
WHERE task_queue_bucket.job_id = $21::UUID), $22::INTEGER) - (SELECT count(*) AS count_1
FROM task
WHERE task.job_id = $21::UUID AND task.status = 'pending' AND task.waiting AND task.run_at >= $23::TIMESTAMP WITH TIME ZONE AND (task.run_at > $23::TIMESTAMP WITH TIME ZONE OR task.run_at = $23::TIMESTAMP WITH TIME ZONE AND (task.priority < $24::INTEGER OR task.priority = $24::INTEGER AND (task.turn_at, task.id) > ($25::TIMESTAMP WITH TIME ZONE, $26::UUID))))) + $27::INTEGER AS queue_position
FROM inserted
