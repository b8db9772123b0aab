-- $1 app, $2 id.
SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
FROM idem_tasks WHERE app = $1 AND id = $2
