-- ListSteps: an execution's steps in creation order. $1 app, $2 execution_id.
SELECT id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at FROM idem_steps WHERE app = $1 AND execution_id = $2 ORDER BY created_at, id
