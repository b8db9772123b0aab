-- RerunTx: the task's current execution moves to the new one.
UPDATE idem_tasks SET current_execution = :execution_id, status = :status
WHERE app = :app AND id = :id
