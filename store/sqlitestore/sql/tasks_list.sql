-- ListTasks: an application's tasks, newest first, after the cursor
-- (created_at, id) of the previous page's last task.
SELECT id, type, input, external_ref, deadline, current_execution, status, created_at
FROM idem_tasks
WHERE app = :app
  AND (:type = '' OR type = :type)
  AND (:exclude = '' OR type <> :exclude)
  AND (:status = 0 OR status = :status)
  AND (:after = 0 OR created_at < :after_time OR (created_at = :after_time AND id < :after_id))
ORDER BY created_at DESC, id DESC
LIMIT :limit
