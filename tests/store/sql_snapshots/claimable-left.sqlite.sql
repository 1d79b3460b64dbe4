-- claimable-left (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 now
--   2 worker_id
--   3 room_id_1 = '@internal'
--   4 coalesce_1 = 1
--   5 coalesce_2 = 0
--   6 coalesce_3 = 1
--   7 coalesce_4 = 0
--   8 now
--   9 worker_id
--   10 room_id_1 = '@internal'
--   11 coalesce_1 = 1
--   12 coalesce_2 = 0
--   13 coalesce_3 = 1
--   14 coalesce_4 = 0
SELECT (EXISTS (SELECT *
FROM task
WHERE task.status = 'pending' AND NOT task.waiting AND (task.run_at IS NULL OR task.run_at <= ?) AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = ? AND job.room_id != ?) AND CASE WHEN task.limited THEN coalesce((SELECT job.max_running_per_submitter
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_1
FROM task AS running
WHERE running.job_id = task.job_id AND running.submitted_by = task.submitted_by AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? AND coalesce((SELECT job.max_running_per_room
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_2
FROM task AS running
WHERE running.job_id = task.job_id AND running.room_id = task.room_id AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? ELSE 1 END = 1)) OR (EXISTS (SELECT *
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= ? AND task.job_id IN (SELECT worker_job_link.job_id
FROM worker_job_link JOIN job ON job.id = worker_job_link.job_id
WHERE worker_job_link.worker_id = ? AND job.room_id != ?) AND CASE WHEN task.limited THEN coalesce((SELECT job.max_running_per_submitter
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_1
FROM task AS running
WHERE running.job_id = task.job_id AND running.submitted_by = task.submitted_by AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? AND coalesce((SELECT job.max_running_per_room
FROM job
WHERE job.id = task.job_id) - (SELECT count(*) AS count_2
FROM task AS running
WHERE running.job_id = task.job_id AND running.room_id = task.room_id AND running.status IN ('claimed', 'running') AND running.limited), ?) > ? ELSE 1 END = 1)) AS claimable_left
