-- announcer-queue-due (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 until
--   2 limit
--   3 param_1 = 0
UPDATE task SET waiting=0, turn_at=CASE WHEN (task.share_key IS NOT NULL AND (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) > task.turn_at) THEN (SELECT min(queued.turn_at) AS min_1
FROM task AS queued
WHERE queued.job_id = task.job_id AND queued.priority = task.priority AND queued.status = 'pending' AND NOT queued.waiting AND queued.run_at IS NULL) ELSE task.turn_at END WHERE task.id IN (SELECT task.id
FROM task
WHERE task.status = 'pending' AND task.waiting AND task.run_at <= ? ORDER BY task.run_at
 LIMIT ? OFFSET ?) AND task.status = 'pending' AND task.waiting
