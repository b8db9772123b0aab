-- UpdateStepTx: applies only while the step is in $3 and, for a worker's
-- write ($4 <> 0), under that claim ($4 epoch, $5 owner).
-- $1 app, $2 id, $6 status, $7 clear the claim, $8 lease_until, $9 due_at,
-- $10 output (NULL to keep), $11 error ('' to keep), $12 cancel requested.
UPDATE idem_steps
SET status           = $6,
    owner            = CASE WHEN $7 THEN '' ELSE owner END,
    lease_until      = CASE WHEN $7 THEN NULL ELSE coalesce($8, lease_until) END,
    due_at           = coalesce($9, due_at),
    output           = coalesce($10, output),
    error            = CASE WHEN $11 <> '' THEN $11 ELSE error END,
    cancel_requested = cancel_requested OR $12
WHERE app = $1 AND id = $2 AND status = $3 AND ($4 = 0 OR (epoch = $4 AND owner = $5))
RETURNING id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at
