-- ListTasks: an application's tasks, newest first, after the cursor
-- (created_at, id) of the previous page's last task.
-- $1 app, $2 type ('' for any), $3 status (0 for any), $4 after_time and
-- $5 after_id (NULL to start), $6 limit, $7 a type to leave out ('' for
-- none).
SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
FROM idem_tasks
WHERE app = $1
  AND ($2 = '' OR type = $2)
  AND ($7 = '' OR type <> $7)
  AND ($3 = 0 OR status = $3)
  AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5::text COLLATE "C"))
ORDER BY created_at DESC, id DESC
LIMIT $6
