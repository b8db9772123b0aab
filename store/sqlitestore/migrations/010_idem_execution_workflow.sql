-- A workflow's execution names its workflow and the version it pinned
-- when it started ('' and 0 for a task's execution).

-- +goose Up

ALTER TABLE idem_executions ADD COLUMN workflow TEXT NOT NULL DEFAULT '';
ALTER TABLE idem_executions ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idem_executions DROP COLUMN version;
ALTER TABLE idem_executions DROP COLUMN workflow;
