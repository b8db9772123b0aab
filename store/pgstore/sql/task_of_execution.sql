-- GetExecutionsTx: the task of an execution, read beside the execution in
-- one pipeline (an execution's task never changes). $1 app, $2 execution
-- id. Columns as task_get.sql.
SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
FROM idem_tasks
WHERE app = $1 AND id = (SELECT task_id FROM idem_executions WHERE app = $1 AND id = $2)
