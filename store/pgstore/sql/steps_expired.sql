-- ExpiredSteps: executing steps whose lease ended before $1, oldest lease
-- first, at most $2; the caller settles them (any application).
SELECT app, id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at FROM idem_steps WHERE status = 3 AND lease_until < $1 ORDER BY lease_until, id LIMIT $2
