-- RerunTx: the task's current execution moves to the new one.
-- $1 app, $2 id, $3 execution_id, $4 status.
UPDATE idem_tasks SET current_execution = $3, status = $4
WHERE app = $1 AND id = $2
