-- sweep-worker-gone-fail-exhausted (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 status = 'failed'
--   2 completed_at = '2026-03-14 12:00:00.250000+00:00'
--   3 error = 'gone'
--   4 version_1 = 1
UPDATE task SET status=?, completed_at=?, error=?, version=(task.version + ?) WHERE task.status IN ('claimed', 'running') AND task.worker_id IS NOT NULL AND NOT (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id)) AND task.attempt >= task.max_attempts RETURNING id, job_id, room_id, status, payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, result, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited
