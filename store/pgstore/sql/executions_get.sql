-- GetExecutionsTx: each execution of a list and its task, in one
-- statement. $1 apps, $2 execution ids (arrays of one length). A row per
-- execution found with its task, in the list's order: n (its place in the
-- list, from 1), the columns of execution_get.sql, then those of
-- task_get.sql. A ref without a row, or whose task has none, has no row.
--
-- Each lookup is a LATERAL subquery with a LIMIT, which the planner does
-- not merge into a join: the plan walks the list and reads each row by
-- itself (through its primary key, once a table is more than a few
-- pages), and never hashes a whole table.
SELECT r.n,
       e.task_id, e.number, e.status, e.last_seq, e.created_at, e.started_at, e.finished_at, e.output, e.error,
       e.progress, e.workflow, e.version,
       t.id, t.type, t.input, t.external_ref, t.deadline, t.current_execution, t.status, t.created_at
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r (app, id, n)
CROSS JOIN LATERAL (
    SELECT task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version
    FROM idem_executions
    WHERE app = r.app COLLATE "C" AND id = r.id COLLATE "C"
    LIMIT 1
) e
CROSS JOIN LATERAL (
    SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
    FROM idem_tasks
    WHERE app = r.app COLLATE "C" AND id = e.task_id
    LIMIT 1
) t
ORDER BY r.n
