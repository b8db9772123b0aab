-- TransitionTx: the conditional update. It applies only while the
-- execution is in the status the change was decided on ($3): a concurrent
-- transition waits for the row lock, then finds the new status and
-- updates nothing. It moves last_seq for the event written next and
-- returns the row as it now is.
-- $1 app, $2 id, $3 from, $4 to, $5 started_at, $6 finished_at (NULL to
-- keep), $7 output (NULL to keep), $8 error ('' to keep), $9 progress (0
-- to keep).
UPDATE idem_executions
SET status      = $4,
    last_seq    = last_seq + 1,
    started_at  = coalesce($5, started_at),
    finished_at = coalesce($6, finished_at),
    output      = coalesce($7, output),
    error       = CASE WHEN $8 <> '' THEN $8 ELSE error END,
    progress    = CASE WHEN $9 <> 0 THEN $9 ELSE progress END
WHERE app = $1 AND id = $2 AND status = $3
RETURNING task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress
