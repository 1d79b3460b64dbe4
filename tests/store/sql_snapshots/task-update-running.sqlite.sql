-- task-update-running (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 v_status
--   2 v_started_at
--   3 v_lease_expires_at
--   4 version_1 = 1
--   5 b_task_id
--   6 status_1 = 'claimed'
--   7 b_claim_token
--   8 b_user_id
UPDATE task SET status=?, started_at=?, lease_expires_at=?, version=(task.version + ?) WHERE task.id = ? AND task.status = ? AND task.claim_token = ? AND (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id AND worker.user_id = ?)) RETURNING id, job_id, room_id, status, CAST(payload AS TEXT) AS payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited, NULL AS result, EXISTS (SELECT *
FROM worker_job_link
WHERE job_id = task.job_id) AS job_served
