-- ClaimStepsReadTx: the executions and tasks of the steps a claim just
-- took, read in the claim's own pipeline, after it. $1 the claim's
-- lease_until, $2 its owner. A row per step the owner holds with that
-- lease: the step's app and id, the columns of execution_get.sql, then those of
-- task_get.sql. The caller keeps the rows of the steps the claim returned
-- (an owner token reused within one transaction may hold others).
--
-- The steps are found through idem_steps_executing (lease_until, id) at
-- the claim's exact lease_until, and each execution and task by its
-- primary key through a LATERAL subquery with a LIMIT, which the planner
-- does not merge into a join: never a scan or a hash of a whole table.
SELECT s.app, s.id,
       e.task_id, e.number, e.status, e.last_seq, e.created_at, e.started_at, e.finished_at, e.output, e.error,
       e.progress, e.workflow, e.version,
       t.id, t.type, t.input, t.external_ref, t.deadline, t.current_execution, t.status, t.created_at
FROM idem_steps s
CROSS JOIN LATERAL (
    SELECT task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version
    FROM idem_executions
    WHERE app = s.app AND id = s.execution_id
    LIMIT 1
) e
CROSS JOIN LATERAL (
    SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
    FROM idem_tasks
    WHERE app = s.app AND id = e.task_id
    LIMIT 1
) t
WHERE s.status = 3 AND s.lease_until = $1 AND s.owner = $2
