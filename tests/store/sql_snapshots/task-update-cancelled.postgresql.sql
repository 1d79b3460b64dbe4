-- task-update-cancelled (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 v_status
--   2 v_completed_at
--   3 version_1 = 1
--   4 b_task_id
--   5 status_1 = 'claimed'
--   6 status_2 = 'pending'
--   7 status_3 = 'running'
--   8 b_user_id
UPDATE task SET status=$1::VARCHAR, completed_at=$2::TIMESTAMP WITH TIME ZONE, version=(task.version + $3::INTEGER) WHERE task.id = $4::UUID AND (task.status = $5::VARCHAR OR task.status = $6::VARCHAR OR task.status = $7::VARCHAR) AND ((EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id AND worker.user_id = $8::UUID)) OR task.submitted_by = $8::UUID) RETURNING task.id, task.job_id, task.room_id, task.status, CAST(task.payload AS TEXT) AS payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited, NULL AS result, EXISTS (SELECT *
FROM worker_job_link
WHERE worker_job_link.job_id = task.job_id) AS job_served
