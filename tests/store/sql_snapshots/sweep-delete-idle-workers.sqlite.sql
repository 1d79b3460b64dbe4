-- sweep-delete-idle-workers (sqlite), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 id_1 = ['00000000-0000-0000-0000-000000000001']
DELETE FROM worker WHERE worker.id IN (__[POSTCOMPILE_id_1]) AND NOT (EXISTS (SELECT *
FROM task
WHERE task.worker_id = worker.id AND task.status IN ('claimed', 'running'))) RETURNING id
