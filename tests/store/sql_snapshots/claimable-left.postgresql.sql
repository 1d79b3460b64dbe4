-- claimable-left (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 now
--   2 worker_id
--   3 room_id_1 = '@internal'
SELECT (EXISTS (SELECT *
FROM task
WHERE task.status = 'pending' AND NOT task.waiting AND (task.run_at IS NULL OR task.run_at <= $1::TIMESTAMP WITH TIME ZONE) AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = $2::UUID AND job.room_id != $3::VARCHAR) AND CASE WHEN task.limited THEN taskhub_within_limits(task.job_id, task.submitted_by, task.room_id) ELSE true END)) OR (EXISTS (SELECT *
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= $1::TIMESTAMP WITH TIME ZONE AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = $2::UUID AND job.room_id != $3::VARCHAR) AND CASE WHEN task.limited THEN taskhub_within_limits(task.job_id, task.submitted_by, task.room_id) ELSE true END)) AS claimable_left
