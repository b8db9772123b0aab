-- $1 app, $2 id.
SELECT id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at FROM idem_steps WHERE app = $1 AND id = $2
