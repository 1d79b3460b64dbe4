-- sweep-fail-stuck-internal-tasks (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 status = 'failed'
--   2 completed_at = '2026-03-14 12:00:00.250000+00:00'
--   3 error = 'timeout'
--   4 version_1 = 1
--   5 room_id_1 = '@internal'
--   6 coalesce_1 = '2026-03-14 12:00:00.250000+00:00'
UPDATE task SET status=?, completed_at=?, error=?, version=(task.version + ?) WHERE task.status IN ('claimed', 'running') AND task.job_id IN (SELECT job.id
FROM job
WHERE job.room_id = ?) AND coalesce(task.started_at, task.run_at, task.created_at) < ? RETURNING id, job_id, room_id, status, payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, result, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited
