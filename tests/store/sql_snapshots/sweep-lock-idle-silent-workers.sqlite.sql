-- sweep-lock-idle-silent-workers (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 last_heartbeat_1 = '2026-03-14 12:00:00.250000+00:00'
--   2 param_1 = 500
--   3 param_2 = 0
SELECT worker.id
FROM worker
WHERE worker.last_heartbeat < ? AND NOT (EXISTS (SELECT *
FROM task
WHERE task.worker_id = worker.id AND task.status IN ('claimed', 'running'))) ORDER BY worker.last_heartbeat, worker.id
 LIMIT ? OFFSET ?
