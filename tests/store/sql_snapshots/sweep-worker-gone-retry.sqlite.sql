-- sweep-worker-gone-retry (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 status = 'pending'
--   2 worker_id = None
--   3 error = 'gone'
--   4 claim_token = None
--   5 lease_expires_at = None
--   6 run_at = None
--   7 version_1 = 1
--   8 waiting = False
--   9 id_1 = '00000000-0000-0000-0000-000000000001'
--   10 attempt_1 = 1
UPDATE task SET status=?, worker_id=?, error=?, claim_token=?, lease_expires_at=?, run_at=?, version=(task.version + ?), waiting=?, turn_at=CASE WHEN (task.share_key IS NOT NULL AND (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) > task.turn_at) THEN (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) ELSE task.turn_at END WHERE task.id = ? AND task.attempt = ? AND task.status IN ('claimed', 'running') AND task.worker_id IS NOT NULL AND NOT (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id)) RETURNING id, job_id, room_id, status, payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, result, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited
