-- ClaimStepTx, last: claim the step the two candidate queries chose
-- (step_candidate_dispatched.sql per type, step_candidate_expired.sql).
-- SQLite has one writer, so nothing changed the step since they read it;
-- the conditions are checked again anyway.
UPDATE idem_steps
SET status = 3, epoch = epoch + 1, attempts = attempts + 1, owner = :owner, lease_until = :lease_until
WHERE app = :app AND id = :id AND cancel_requested = 0
  AND ((status = 2 AND due_at <= :now) OR (status = 3 AND once = 0 AND lease_until <= :now))
RETURNING app, id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at
