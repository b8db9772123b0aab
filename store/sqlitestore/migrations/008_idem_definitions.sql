-- Versioned definitions of applications: workflows and connections
-- (store.DefinitionStore). A version, once written, is never changed.
-- Times are microseconds since the Unix epoch.

-- +goose Up

CREATE TABLE idem_definitions (
    app        TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    body       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (app, kind, name, version)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE idem_definitions;
