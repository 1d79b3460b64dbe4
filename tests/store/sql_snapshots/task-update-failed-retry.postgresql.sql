-- task-update-failed-retry (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 v_status
--   2 v_worker_id
--   3 v_error
--   4 v_claim_token
--   5 v_lease_expires_at
--   6 v_run_at
--   7 version_1 = 1
--   8 v_waiting
--   9 b_task_id
--   10 status_1 = 'claimed'
--   11 status_2 = 'running'
--   12 b_claim_token
--   13 b_attempt
--   14 b_user_id
UPDATE task SET status=$1::VARCHAR, worker_id=$2::UUID, error=$3::VARCHAR, claim_token=$4::UUID, lease_expires_at=$5::TIMESTAMP WITH TIME ZONE, run_at=$6::TIMESTAMP WITH TIME ZONE, version=(task.version + $7::INTEGER), waiting=$8::BOOLEAN, turn_at=CASE WHEN (task.share_key IS NOT NULL AND (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) > task.turn_at) THEN (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) ELSE task.turn_at END WHERE task.id = $9::UUID AND (task.status = $10::VARCHAR OR task.status = $11::VARCHAR) AND task.claim_token = $12::UUID AND task.attempt = $13::INTEGER AND (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id AND worker.user_id = $14::UUID)) RETURNING task.id, task.job_id, task.room_id, task.status, CAST(task.payload AS TEXT) AS payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited, NULL AS result, EXISTS (SELECT *
FROM worker_job_link
WHERE worker_job_link.job_id = task.job_id) AS job_served
