-- CreateTaskTx: the task, pointing at its first execution. An id the
-- application used already inserts nothing (ErrDuplicate).
INSERT INTO idem_tasks (app, id, type, input, external_ref, deadline, current_execution, status, created_at)
VALUES (:app, :id, :type, :input, :external_ref, :deadline, :current_execution, :status, :created_at)
ON CONFLICT DO NOTHING
