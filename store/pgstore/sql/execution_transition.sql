-- TransitionTx, in one statement: the conditional update of the
-- execution, the event it reports and the task's status.
--
-- The update applies only while the execution is in the status the change
-- was decided on ($3): a concurrent transition waits for the row lock,
-- then finds the new status and updates nothing, and then nothing else is
-- written either (no row comes back). It moves last_seq, which numbers the
-- event. The task's status follows its current execution's, and only
-- that one's: a late change of an execution a rerun replaced does not
-- move it.
-- $1 app, $2 id, $3 from, $4 to, $5 started_at, $6 finished_at (NULL to
-- keep), $7 output (NULL to keep), $8 error ('' to keep), $9 progress (0
-- to keep), $10 event type, $11 event data, $12 event time, $13 reopen
-- (finished_at, output and error cleared: an operator's retry).
WITH e AS (
    UPDATE idem_executions
    SET status      = $4,
        last_seq    = last_seq + 1,
        started_at  = coalesce($5, started_at),
        finished_at = CASE WHEN $13 THEN NULL ELSE coalesce($6, finished_at) END,
        output      = CASE WHEN $13 THEN NULL ELSE coalesce($7, output) END,
        error       = CASE WHEN $8 <> '' THEN $8 WHEN $13 THEN '' ELSE error END,
        progress    = CASE WHEN $9 <> 0 THEN $9 ELSE progress END
    WHERE app = $1 AND id = $2 AND status = $3
    RETURNING task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version
), ev AS (
    INSERT INTO idem_execution_events (app, execution_id, seq, type, data, at)
    SELECT $1, $2, e.last_seq, $10, $11, $12 FROM e
), t AS (
    -- Scalar subqueries, not a join with e: a join's plan hangs on the
    -- statistics, and a young table's stale ones make it a scan of every
    -- task.
    UPDATE idem_tasks SET status = (SELECT status FROM e)
    WHERE app = $1 AND id = (SELECT task_id FROM e) AND current_execution = $2
)
SELECT task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version FROM e
