-- sweep-worker-gone-fail-exhausted (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 status = 'failed'
--   2 completed_at = '2026-03-14 12:00:00.250000+00:00'
--   3 error = 'gone'
--   4 version_1 = 1
UPDATE task SET status=$1::VARCHAR, completed_at=$2::TIMESTAMP WITH TIME ZONE, error=$3::VARCHAR, version=(task.version + $4::INTEGER) WHERE task.status IN ('claimed', 'running') AND task.worker_id IS NOT NULL AND NOT (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id)) AND task.attempt >= task.max_attempts RETURNING task.id, task.job_id, task.room_id, task.status, task.payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, task.result, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited
