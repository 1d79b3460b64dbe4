-- submit-insert (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 b_id
--   2 b_room_id
--   3 param_1 = 'pending'
--   4 b_payload
--   5 b_created_at
--   6 b_submitted_by
--   7 b_attempt
--   8 b_key
--   9 b_priority
--   10 b_max_attempts
--   11 b_run_at
--   12 b_waiting
--   13 param_2 = 1
--   14 b_digest
--   15 b_rerun_of
--   16 b_turn_at
--   17 b_share_key
--   18 b_share_backlogged
--   19 b_job_id
--   20 b_job_version
INSERT INTO task (id, job_id, room_id, status, payload, created_at, submitted_by, attempt, idempotency_key, priority, max_attempts, run_at, waiting, version, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited) SELECT ? AS anon_1, job.id, ? AS anon_2, ? AS anon_3, ? AS anon_4, ? AS anon_5, ? AS anon_6, ? AS anon_7, ? AS anon_8, ? AS anon_9, coalesce(?, job.max_attempts) AS coalesce_1, ? AS anon_10, ? AS anon_11, ? AS anon_12, ? AS anon_13, ? AS anon_14, ? AS anon_15, ? AS anon_16, ? AS anon_17, job.max_running_per_submitter IS NOT NULL OR job.max_running_per_room IS NOT NULL AS anon_18
FROM job
WHERE job.id = ? AND job.updated_at = ? AND job.deleted IS 0 ON CONFLICT DO NOTHING RETURNING max_attempts
