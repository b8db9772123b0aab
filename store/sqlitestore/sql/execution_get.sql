SELECT task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress
FROM idem_executions WHERE app = :app AND id = :id
