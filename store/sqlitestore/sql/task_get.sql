SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
FROM idem_tasks WHERE app = :app AND id = :id
