-- CreateTaskTx, RerunTx: an execution with its first event's sequence.
-- $1 app, $2 id, $3 task_id, $4 number, $5 status, $6 created_at,
-- $7 workflow, $8 version.
INSERT INTO idem_executions (app, id, task_id, number, status, last_seq, created_at, workflow, version)
VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8)
ON CONFLICT DO NOTHING
