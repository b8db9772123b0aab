-- CreateTaskTx: the task, pointing at its first execution. An id the
-- application used already inserts nothing (ErrDuplicate); a concurrent
-- insert of the same id waits for the other transaction to end.
-- $1 app, $2 id, $3 type, $4 input, $5 external_ref, $6 deadline (NULL for
-- none), $7 current_execution, $8 status, $9 created_at.
INSERT INTO idem_tasks (app, id, type, input, external_ref, deadline, current_execution, status, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT DO NOTHING
