-- +goose Up

-- OverdueExecutions walks the tasks with a deadline, earliest first.
-- Partial: tasks without one are not in it.
CREATE INDEX idem_tasks_deadline ON idem_tasks (deadline) WHERE deadline IS NOT NULL;

-- +goose Down
DROP INDEX idem_tasks_deadline;
