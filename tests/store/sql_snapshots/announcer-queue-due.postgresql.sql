-- announcer-queue-due (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 until
--   2 limit
WITH due AS MATERIALIZED
(SELECT task.id AS id
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= $1::TIMESTAMP WITH TIME ZONE ORDER BY task.run_at
 LIMIT $2 FOR UPDATE SKIP LOCKED)
 UPDATE task SET waiting=false, turn_at=CASE WHEN (task.share_key IS NOT NULL AND (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) > task.turn_at) THEN (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) ELSE task.turn_at END FROM due WHERE task.id = due.id AND task.status = 'pending' AND task.waiting
