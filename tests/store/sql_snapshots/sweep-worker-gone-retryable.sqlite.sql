-- sweep-worker-gone-retryable (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
SELECT task.id, task.attempt, task.worker_id
FROM task
WHERE task.status IN ('claimed', 'running') AND task.worker_id IS NOT NULL AND NOT (EXISTS (SELECT *
FROM worker
WHERE worker.id = task.worker_id)) AND task.attempt < task.max_attempts
