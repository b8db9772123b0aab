-- +goose Up

-- A workflow's execution names its workflow and the version it pinned
-- when it started ('' and 0 for a task's execution).
ALTER TABLE idem_executions
    ADD COLUMN workflow text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN version  integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idem_executions DROP COLUMN workflow, DROP COLUMN version;
