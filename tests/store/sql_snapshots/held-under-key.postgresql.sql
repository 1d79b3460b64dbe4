-- held-under-key (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 worker_id
--   2 claim_key
SELECT task.id, task.job_id, task.room_id, task.status, task.payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, task.result, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited
FROM task
WHERE task.worker_id = $1::UUID AND task.status = 'claimed' AND task.claim_key = $2::VARCHAR
