-- claim-queue-limit2-owner-checked-closed-rooms (sqlite), from tests/store/test_sql_snapshots.py
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
--   23 param_1 = 2
--   24 param_2 = 0
--   25 param_3 = 2
--   26 param_4 = 0
UPDATE task SET status=?, started_at=?, worker_id=?, error=?, claim_token=?, attempt=(task.attempt + ?), result=?, progress=?, progress_message=?, lease_expires_at=?, version=(task.version + ?), claim_key=? WHERE task.id IN (SELECT anon_1.id
FROM (SELECT anon_2.id AS id, anon_2.priority AS priority, anon_2.turn_at AS turn_at
FROM (SELECT anon_3.id AS id, anon_3.priority AS priority, anon_3.turn_at AS turn_at, anon_3.job_id AS job_id, anon_3.submitted_by AS submitted_by, anon_3.room_id AS room_id, anon_3.left_submitter AS left_submitter, anon_3.left_room AS left_room
FROM (SELECT anon_4.id AS id, anon_4.priority AS priority, anon_4.turn_at AS turn_at, anon_4.job_id AS job_id, anon_4.submitted_by AS submitted_by, anon_4.room_id AS room_id, anon_4.left_submitter AS left_submitter, anon_4.left_room AS left_room, anon_4.left_room IS NULL OR row_number() OVER (PARTITION BY anon_4.job_id, anon_4.room_id ORDER BY anon_4.priority DESC, anon_4.turn_at, anon_4.id) <= anon_4.left_room AS fits
FROM (SELECT anon_5.id AS id, anon_5.priority AS priority, anon_5.turn_at AS turn_at, anon_5.job_id AS job_id, anon_5.submitted_by AS submitted_by, anon_5.room_id AS room_id, anon_5.left_submitter AS left_submitter, anon_5.left_room AS left_room
FROM (SELECT anon_6.id AS id, anon_6.priority AS priority, anon_6.turn_at AS turn_at, anon_6.job_id AS job_id, anon_6.submitted_by AS submitted_by, anon_6.room_id AS room_id, anon_6.left_submitter AS left_submitter, anon_6.left_room AS left_room, anon_6.left_submitter IS NULL OR row_number() OVER (PARTITION BY anon_6.job_id, anon_6.submitted_by ORDER BY anon_6.priority DESC, anon_6.turn_at, anon_6.id) <= anon_6.left_submitter AS fits
FROM (SELECT anon_7.id AS id, anon_7.priority AS priority, anon_7.turn_at AS turn_at, candidate.job_id AS job_id, candidate.submitted_by AS submitted_by, candidate.room_id AS room_id, CASE WHEN candidate.limited THEN (SELECT job.max_running_per_submitter
FROM job
WHERE job.id = candidate.job_id) - (SELECT count(*) AS count_1
FROM task AS running
WHERE running.job_id = candidate.job_id AND running.submitted_by = candidate.submitted_by AND running.status IN ('claimed', 'running') AND running.limited) ELSE NULL END AS left_submitter, CASE WHEN candidate.limited THEN (SELECT job.max_running_per_room
FROM job
WHERE job.id = candidate.job_id) - (SELECT count(*) AS count_2
FROM task AS running
WHERE running.job_id = candidate.job_id AND running.room_id = candidate.room_id AND running.status IN ('claimed', 'running') AND running.limited) ELSE NULL END AS left_room
FROM (SELECT anon_8.id AS id, anon_8.priority AS priority, anon_8.turn_at AS turn_at
FROM (SELECT task.id AS id, task.priority AS priority, task.turn_at AS turn_at
FROM task
WHERE task.status = 'pending' AND NOT task.waiting AND (task.run_at IS NULL OR task.run_at <= ?) AND CASE WHEN task.limited THEN coalesce((SELECT job.max_running_per_submitter
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_3
FROM task AS running
WHERE running.job_id = task.job_id AND running.submitted_by = task.submitted_by AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? AND coalesce((SELECT job.max_running_per_room
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_4
FROM task AS running
WHERE running.job_id = task.job_id AND running.room_id = task.room_id AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? ELSE 1 END = 1 AND (task.room_id NOT IN (__[POSTCOMPILE_closed_rooms])) AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = ? AND job.room_id != ? AND (EXISTS (SELECT *
FROM worker
WHERE worker.id = ? AND worker.user_id = ?))) ORDER BY task.priority DESC, task.turn_at, task.id
 LIMIT ? OFFSET ?) AS anon_8) AS anon_7 JOIN task AS candidate ON candidate.id = anon_7.id) AS anon_6) AS anon_5
WHERE anon_5.fits = 1) AS anon_4) AS anon_3
WHERE anon_3.fits = 1) AS anon_2) AS anon_1 ORDER BY anon_1.priority DESC, anon_1.turn_at, anon_1.id
 LIMIT ? OFFSET ?) AND task.status = 'pending' RETURNING id, job_id, room_id, status, CAST(payload AS TEXT) AS payload, created_at, started_at, completed_at, worker_id, error, submitted_by, claim_token, attempt, result, progress, progress_message, lease_expires_at, idempotency_key, priority, max_attempts, run_at, version, claim_key, waiting, request_digest, rerun_of, turn_at, share_key, share_backlogged, limited
