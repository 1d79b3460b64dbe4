-- task-read-stored (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 task_id
SELECT task.id, task.job_id, task.room_id, task.status, CAST(task.payload AS TEXT) AS payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, CAST(task.result AS TEXT) AS result, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited, job.room_id AS job_room_id, job.category AS job_category, job.name AS job_name_part
FROM task JOIN job ON job.id = task.job_id
WHERE task.id = ?
