-- RerunTx: the number of the task's current execution (the rerun's is one
-- more), locking the task so that two reruns of it take turns.
-- $1 app, $2 id.
SELECT e.number
FROM idem_tasks t JOIN idem_executions e ON e.app = t.app AND e.id = t.current_execution
WHERE t.app = $1 AND t.id = $2
FOR UPDATE OF t
