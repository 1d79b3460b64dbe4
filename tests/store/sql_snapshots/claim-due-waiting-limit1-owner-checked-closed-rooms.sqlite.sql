-- claim-due-waiting-limit1-owner-checked-closed-rooms (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 status = 'claimed'
--   2 started_at = None
--   3 worker_id
--   4 error = None
--   5 claim_token
--   6 attempt_1 = 1
--   7 result = None
--   8 progress = None
--   9 progress_message = None
--   10 lease_until
--   11 version_1 = 1
--   12 claim_key
--   13 now
--   14 coalesce_1 = 1
--   15 coalesce_2 = 0
--   16 coalesce_3 = 1
--   17 coalesce_4 = 0
--   18 closed_rooms
--   19 worker_id
--   20 room_id_1 = '@internal'
--   21 worker_id
--   22 owner_id
--   23 param_1 = 1
--   24 param_2 = 0
UPDATE task SET status=?, started_at=?, worker_id=?, error=?, claim_token=?, attempt=(task.attempt + ?), result=?, progress=?, progress_message=?, lease_expires_at=?, version=(task.version + ?), claim_key=? WHERE task.id IN (SELECT task.id
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= ? AND CASE WHEN task.limited THEN coalesce((SELECT job.max_running_per_submitter
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_1
FROM task AS running
WHERE running.job_id = task.job_id AND running.submitted_by = task.submitted_by AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? AND coalesce((SELECT job.max_running_per_room
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_2
FROM task AS running
WHERE running.job_id = task.job_id AND running.room_id = task.room_id AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? ELSE 1 END = 1 AND (task.room_id NOT IN (__[POSTCOMPILE_closed_rooms])) AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = ? AND job.room_id != ? AND (EXISTS (SELECT *
FROM worker
WHERE worker.id = ? AND worker.user_id = ?))) ORDER BY task.priority DESC, task.turn_at, task.id
 LIMIT ? OFFSET ?) AND task.status = 'pending' RETURNING id, job_id, room_id, status, CAST(payload AS TEXT) AS payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, result, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited
