-- Workflow triggers' identities (store.TriggerStore): one row per
-- identity, whose primary key decides which of concurrent triggers
-- starts the execution. Times are microseconds since the Unix epoch.

-- +goose Up

CREATE TABLE idem_triggers (
    app          TEXT    NOT NULL,
    workflow     TEXT    NOT NULL,
    key          BLOB    NOT NULL,
    fingerprint  BLOB    NOT NULL,
    execution_id TEXT    NOT NULL,
    generation   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (app, workflow, key)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE idem_triggers;
