-- OverdueExecutions: live current executions of tasks whose deadline is
-- before $1, earliest deadline first, at most $2 (statuses 1 created,
-- 2 queued, 3 running, 7 canceling).
SELECT e.app, e.id, e.task_id, e.number, e.status, e.last_seq, e.created_at, e.started_at, e.finished_at, e.output, e.error, e.progress, e.workflow, e.version
FROM idem_tasks t JOIN idem_executions e ON e.app = t.app AND e.id = t.current_execution
WHERE t.deadline IS NOT NULL AND t.deadline < $1 AND e.status IN (1, 2, 3, 7)
ORDER BY t.deadline, e.id
LIMIT $2
