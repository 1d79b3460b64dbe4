-- sweep-jobs-served-by (postgresql), from tests/store/test_sql_snapshots.py
-- parameters in order (= the value the statement holds):
--   1 worker_id_1 = ['00000000-0000-0000-0000-000000000001']
SELECT worker_job_link.worker_id, job.id, job.room_id, job.category, job.name
FROM worker_job_link JOIN job ON worker_job_link.job_id = job.id
WHERE worker_job_link.worker_id IN (__[POSTCOMPILE_worker_id_1])
