-- task-update-completed-by-superuser (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 v_status
--   2 v_completed_at
--   3 v_result
--   4 version_1 = 1
--   5 b_task_id
--   6 status_1 = 'running'
UPDATE task SET status=?, completed_at=?, result=?, version=(task.version + ?) WHERE task.id = ? AND task.status = ? RETURNING id, job_id, room_id, status, CAST(payload AS TEXT) AS payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited, NULL AS result, EXISTS (SELECT *
FROM worker_job_link
WHERE job_id = task.job_id) AS job_served
