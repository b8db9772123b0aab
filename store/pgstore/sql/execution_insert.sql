-- CreateTaskTx, RerunTx: an execution with the sequence of its last event
-- written with it (1, or more when CreateTaskTx writes more events).
-- $1 app, $2 id, $3 task_id, $4 number, $5 status, $6 created_at,
-- $7 workflow, $8 version, $9 last_seq.
INSERT INTO idem_executions (app, id, task_id, number, status, last_seq, created_at, workflow, version)
VALUES ($1, $2, $3, $4, $5, $9, $6, $7, $8)
ON CONFLICT DO NOTHING
