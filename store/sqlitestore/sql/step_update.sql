-- UpdateStepTx: applies only while the step is in :from and, for a
-- worker's write (:epoch <> 0), under that claim.
UPDATE idem_steps
SET status           = :status,
    owner            = CASE WHEN :clear THEN '' ELSE owner END,
    lease_until      = CASE WHEN :clear THEN 0 WHEN :lease_until <> 0 THEN :lease_until ELSE lease_until END,
    due_at           = CASE WHEN :due_at <> 0 THEN :due_at ELSE due_at END,
    output           = CASE WHEN :has_output THEN :output ELSE output END,
    error            = CASE WHEN :error <> '' THEN :error ELSE error END,
    cancel_requested = CASE WHEN :cancel THEN 1 ELSE cancel_requested END
WHERE app = :app AND id = :id AND status = :from AND (:epoch = 0 OR (epoch = :epoch AND owner = :owner))
RETURNING id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at
