-- sweep-worker-gone-retry (postgresql), from tests/store/test_sql_snapshots.py
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
UPDATE task SET status=$1::VARCHAR, worker_id=$2::UUID, error=$3::VARCHAR, claim_token=$4::UUID, lease_expires_at=$5::TIMESTAMP WITH TIME ZONE, run_at=$6::TIMESTAMP WITH TIME ZONE, version=(task.version + $7::INTEGER), waiting=$8::BOOLEAN, turn_at=CASE WHEN (task.share_key IS NOT NULL AND (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) > task.turn_at) THEN (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) ELSE task.turn_at END WHERE task.id = $9::UUID AND task.attempt = $10::INTEGER AND task.status IN ('claimed', 'running') AND task.worker_id IS NOT NULL AND NOT (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id)) RETURNING task.id, task.job_id, task.room_id, task.status, task.payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, task.result, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited
