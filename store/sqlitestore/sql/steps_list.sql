-- ListSteps: an execution's steps in creation order.
SELECT id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at FROM idem_steps WHERE app = :app AND execution_id = :execution_id ORDER BY created_at, id
