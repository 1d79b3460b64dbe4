-- claim-due-waiting-limit2-owner-checked-closed-rooms (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 worker_id
--   2 now
--   3 room_id_1 = '@internal'
--   4 closed_rooms
--   5 param_1 = 1
--   6 param_2 = 'claimed'
--   7 param_3 = None
--   8 param_4 = None
--   9 claim_token
--   10 attempt_1 = 1
--   11 param_5 = None
--   12 param_6 = None
--   13 param_7 = None
--   14 lease_until
--   15 version_1 = 1
--   16 claim_key
--   17 room_id_2 = '@internal'
--   18 owner_id
--   19 param_8 = 2
--   20 param_9 = 2
WITH picked AS
(SELECT anon_1.id AS id, anon_1.row_address AS row_address
FROM (SELECT anon_2.id AS id, anon_2.priority AS priority, anon_2.turn_at AS turn_at, anon_2.row_address AS row_address
FROM (SELECT anon_3.id AS id, anon_3.priority AS priority, anon_3.turn_at AS turn_at, anon_3.row_address AS row_address, anon_3.job_id AS job_id, anon_3.submitted_by AS submitted_by, anon_3.room_id AS room_id, anon_3.left_submitter AS left_submitter, anon_3.left_room AS left_room
FROM (SELECT anon_4.id AS id, anon_4.priority AS priority, anon_4.turn_at AS turn_at, anon_4.row_address AS row_address, anon_4.job_id AS job_id, anon_4.submitted_by AS submitted_by, anon_4.room_id AS room_id, anon_4.left_submitter AS left_submitter, anon_4.left_room AS left_room, anon_4.left_room IS NULL OR row_number() OVER (PARTITION BY anon_4.job_id, anon_4.room_id ORDER BY anon_4.priority DESC, anon_4.turn_at, anon_4.id) <= anon_4.left_room AS fits
FROM (SELECT anon_5.id AS id, anon_5.priority AS priority, anon_5.turn_at AS turn_at, anon_5.row_address AS row_address, anon_5.job_id AS job_id, anon_5.submitted_by AS submitted_by, anon_5.room_id AS room_id, anon_5.left_submitter AS left_submitter, anon_5.left_room AS left_room
FROM (SELECT anon_6.id AS id, anon_6.priority AS priority, anon_6.turn_at AS turn_at, anon_6.row_address AS row_address, anon_6.job_id AS job_id, anon_6.submitted_by AS submitted_by, anon_6.room_id AS room_id, anon_6.left_submitter AS left_submitter, anon_6.left_room AS left_room, anon_6.left_submitter IS NULL OR row_number() OVER (PARTITION BY anon_6.job_id, anon_6.submitted_by ORDER BY anon_6.priority DESC, anon_6.turn_at, anon_6.id) <= anon_6.left_submitter AS fits
FROM (SELECT anon_7.id AS id, anon_7.priority AS priority, anon_7.turn_at AS turn_at, anon_7.row_address AS row_address, candidate.job_id AS job_id, candidate.submitted_by AS submitted_by, candidate.room_id AS room_id, CASE WHEN candidate.limited THEN (SELECT job.max_running_per_submitter
FROM job
WHERE job.id = candidate.job_id) - (SELECT count(*) AS count_1
FROM task AS running
WHERE running.job_id = candidate.job_id AND running.submitted_by = candidate.submitted_by AND running.status IN ('claimed', 'running') AND running.limited) ELSE NULL END AS left_submitter, CASE WHEN candidate.limited THEN (SELECT job.max_running_per_room
FROM job
WHERE job.id = candidate.job_id) - (SELECT count(*) AS count_2
FROM task AS running
WHERE running.job_id = candidate.job_id AND running.room_id = candidate.room_id AND running.status IN ('claimed', 'running') AND running.limited) ELSE NULL END AS left_room
FROM (SELECT head0.id AS id, head0.priority AS priority, head0.turn_at AS turn_at, head0.row_address AS row_address
FROM (SELECT worker_job_link.job_id AS job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = $1::UUID AND job.room_id != $16::VARCHAR AND (EXISTS (SELECT *
FROM worker
WHERE worker.id = $1::UUID AND worker.user_id = $17::UUID))) AS served JOIN LATERAL (SELECT task.id AS id, task.priority AS priority, task.turn_at AS turn_at, task.ctid AS row_address
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= $2::TIMESTAMP WITH TIME ZONE AND CASE WHEN task.limited THEN taskhub_within_limits(task.job_id, task.submitted_by, task.room_id) ELSE true END AND (task.room_id NOT IN (__[POSTCOMPILE_closed_rooms])) AND task.job_id = served.job_id ORDER BY task.priority DESC, task.turn_at, task.id
 LIMIT $18::INTEGER FOR UPDATE SKIP LOCKED) AS head0 ON true) AS anon_7 JOIN task AS candidate ON candidate.id = anon_7.id) AS anon_6) AS anon_5
WHERE anon_5.fits) AS anon_4) AS anon_3
WHERE anon_3.fits) AS anon_2) AS anon_1 ORDER BY anon_1.priority DESC, anon_1.turn_at, anon_1.id
 LIMIT $19::INTEGER),
claimed AS
(UPDATE task SET status=$5::VARCHAR, started_at=$6::TIMESTAMP WITH TIME ZONE, worker_id=$1::UUID, error=$7::VARCHAR, claim_token=$8::UUID, attempt=(task.attempt + $9::INTEGER), result=$10::JSON, progress=$11::FLOAT, progress_message=$12::VARCHAR, lease_expires_at=$13::TIMESTAMP WITH TIME ZONE, version=(task.version + $14::INTEGER), claim_key=$15::VARCHAR FROM picked WHERE task.id = picked.id AND picked.row_address = task.ctid AND task.status = 'pending' RETURNING task.id, task.job_id, task.room_id, task.status, CAST(task.payload AS TEXT) AS payload, task.created_at, task.started_at, task.completed_at, task.worker_id, task.error, task.submitted_by, task.claim_token, task.attempt, task.result, task.progress, task.progress_message, task.lease_expires_at, task.idempotency_key, task.priority, task.max_attempts, task.run_at, task.version, task.claim_key, task.waiting, task.request_digest, task.rerun_of, task.turn_at, task.share_key, task.share_backlogged, task.limited)
 SELECT claimed.id, claimed.job_id, claimed.room_id, claimed.status, claimed.payload, claimed.created_at, claimed.started_at, claimed.completed_at, claimed.worker_id, claimed.error, claimed.submitted_by, claimed.claim_token, claimed.attempt, claimed.result, claimed.progress, claimed.progress_message, claimed.lease_expires_at, claimed.idempotency_key, claimed.priority, claimed.max_attempts, claimed.run_at, claimed.version, claimed.claim_key, claimed.waiting, claimed.request_digest, claimed.rerun_of, claimed.turn_at, claimed.share_key, claimed.share_backlogged, claimed.limited, (SELECT worker.user_id
FROM worker
WHERE worker.id = $1::UUID) AS worker_owner, (EXISTS (SELECT *
FROM task
WHERE task.status = 'pending' AND NOT task.waiting AND (task.run_at IS NULL OR task.run_at <= $2::TIMESTAMP WITH TIME ZONE) AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = $1::UUID AND job.room_id != $3::VARCHAR) AND CASE WHEN task.limited THEN taskhub_within_limits(task.job_id, task.submitted_by, task.room_id) ELSE true END AND (task.room_id NOT IN (__[POSTCOMPILE_closed_rooms])))) OR (EXISTS (SELECT *
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= $2::TIMESTAMP WITH TIME ZONE AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = $1::UUID AND job.room_id != $3::VARCHAR) AND CASE WHEN task.limited THEN taskhub_within_limits(task.job_id, task.submitted_by, task.room_id) ELSE true END AND (task.room_id NOT IN (__[POSTCOMPILE_closed_rooms])))) AS claimable_left
FROM (SELECT $4::INTEGER AS one) AS one LEFT OUTER JOIN claimed ON true
