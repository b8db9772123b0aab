SELECT task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version
FROM idem_executions WHERE app = :app AND id = :id
