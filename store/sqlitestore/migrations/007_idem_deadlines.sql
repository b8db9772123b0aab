-- OverdueExecutions walks the tasks with a deadline, earliest first.
-- Partial: tasks without one (deadline 0) are not in it.

-- +goose Up
CREATE INDEX idem_tasks_deadline ON idem_tasks (deadline) WHERE deadline <> 0;

-- +goose Down
DROP INDEX idem_tasks_deadline;
