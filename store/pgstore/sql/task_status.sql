-- The task's status follows its current execution's, and only that one's:
-- a late change of an execution a rerun replaced does not move it.
-- $1 app, $2 id, $3 execution_id, $4 status.
UPDATE idem_tasks SET status = $4
WHERE app = $1 AND id = $2 AND current_execution = $3
