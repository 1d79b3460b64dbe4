-- task-update-failed-retry (sqlite), from tests/store/test_sql_snapshots.py
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
UPDATE task SET status=?, worker_id=?, error=?, claim_token=?, lease_expires_at=?, run_at=?, version=(task.version + ?), waiting=?, turn_at=CASE WHEN (task.share_key IS NOT NULL AND (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) > task.turn_at) THEN (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) ELSE task.turn_at END WHERE task.id = ? AND (task.status = ? OR task.status = ?) AND task.claim_token = ? AND task.attempt = ? AND (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id AND worker.user_id = ?)) RETURNING id, job_id, room_id, status, CAST(payload AS TEXT) AS payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited, NULL AS result, EXISTS (SELECT *
FROM worker_job_link
WHERE job_id = task.job_id) AS job_served
