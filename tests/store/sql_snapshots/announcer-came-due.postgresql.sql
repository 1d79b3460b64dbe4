-- announcer-came-due (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 after
--   2 after_id
--   3 until
--   4 limit
SELECT task.id, task.room_id, task.run_at, job.room_id AS job_room, job.category, job.name
FROM task JOIN job ON job.id = task.job_id
WHERE task.status = 'pending' AND task.run_at IS NOT NULL AND (task.run_at > $1::TIMESTAMP WITH TIME ZONE OR task.run_at = $1::TIMESTAMP WITH TIME ZONE AND task.id > $2::UUID) AND task.run_at <= $3::TIMESTAMP WITH TIME ZONE ORDER BY task.run_at, task.id
 LIMIT $4
