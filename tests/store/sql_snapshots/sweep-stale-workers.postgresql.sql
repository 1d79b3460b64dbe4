-- sweep-stale-workers (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 last_heartbeat_1 = '2026-03-14 12:00:00.250000+00:00'
--   2 param_1 = 500
SELECT worker.id
FROM worker
WHERE worker.last_heartbeat < $1::TIMESTAMP WITH TIME ZONE ORDER BY worker.last_heartbeat, worker.id
 LIMIT $2::INTEGER
