-- AddStepTx: a step, not yet claimed. An id the application used already
-- inserts nothing (ErrDuplicate).
INSERT INTO idem_steps (app, id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until,
                        due_at, cancel_requested, output, error, idempotency_key, created_at)
VALUES (:app, :id, :execution_id, :name, :type, :once, :status, 0, 0, '', 0, :due_at, 0, NULL, '', :idempotency_key, :created_at)
ON CONFLICT DO NOTHING
