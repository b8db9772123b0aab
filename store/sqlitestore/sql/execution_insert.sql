-- CreateTaskTx, RerunTx: an execution with the sequence of its last event
-- written with it (1, or more when CreateTaskTx writes more events).
INSERT INTO idem_executions (app, id, task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version)
VALUES (:app, :id, :task_id, :number, :status, :last_seq, :created_at, 0, 0, NULL, '', 0, :workflow, :version)
ON CONFLICT DO NOTHING
