-- The task's status follows its current execution's, and only that one's:
-- a late change of an execution a rerun replaced does not move it.
UPDATE idem_tasks SET status = :status
WHERE app = :app AND id = :id AND current_execution = :execution_id
