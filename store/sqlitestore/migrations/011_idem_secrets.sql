-- Applications' secrets (store.SecretStore): the values workflows'
-- headers name. Times are microseconds since the Unix epoch.

-- +goose Up

CREATE TABLE idem_secrets (
    app        TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (app, name)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE idem_secrets;
