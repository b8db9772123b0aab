-- AddStepTx: a step, not yet claimed. An id the application used already
-- inserts nothing (ErrDuplicate).
-- $1 app, $2 id, $3 execution_id, $4 name, $5 type, $6 once, $7 status,
-- $8 due_at, $9 idempotency_key, $10 created_at.
INSERT INTO idem_steps (app, id, execution_id, name, type, once, status, due_at, idempotency_key, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT DO NOTHING
