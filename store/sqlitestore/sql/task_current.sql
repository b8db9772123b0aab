-- RerunTx: the number of the task's current execution (the rerun's is one
-- more).
SELECT e.number
FROM idem_tasks t JOIN idem_executions e ON e.app = t.app AND e.id = t.current_execution
WHERE t.app = :app AND t.id = :id
