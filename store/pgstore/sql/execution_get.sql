-- $1 app, $2 id.
SELECT task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version
FROM idem_executions WHERE app = $1 AND id = $2
