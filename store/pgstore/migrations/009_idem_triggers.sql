-- +goose Up

-- Workflow triggers' identities (store.TriggerStore): one row per
-- identity, whose primary key decides which of concurrent triggers
-- starts the execution.
CREATE TABLE idem_triggers (
    generation   integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    app          text COLLATE "C" NOT NULL,
    workflow     text COLLATE "C" NOT NULL,
    key          bytea       NOT NULL,
    fingerprint  bytea       NOT NULL,
    execution_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (app, workflow, key)
);

-- +goose Down
DROP TABLE idem_triggers;
