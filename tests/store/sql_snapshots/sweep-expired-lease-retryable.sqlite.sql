-- sweep-expired-lease-retryable (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 lease_expires_at_1 = '2026-03-14 12:00:00.250000+00:00'
SELECT task.id, task.attempt, task.worker_id
FROM task
WHERE task.status IN ('claimed', 'running') AND task.lease_expires_at < ? AND task.attempt < task.max_attempts
