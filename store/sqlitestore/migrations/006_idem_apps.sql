-- Applications and worker tokens (store.AppStore). Tokens are stored as
-- their SHA-256 hashes only; an application's callback secrets as a JSON
-- array of strings (signing needs them). Times are microseconds since the
-- Unix epoch.

-- +goose Up

CREATE TABLE idem_apps (
    name         TEXT    NOT NULL PRIMARY KEY,
    callback_url TEXT    NOT NULL,
    scheme       TEXT    NOT NULL,
    secrets      TEXT    NOT NULL,
    disabled     INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per token hash: a token finds its application by its key.
CREATE TABLE idem_app_tokens (
    hash BLOB NOT NULL PRIMARY KEY,
    app  TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX idem_app_tokens_app ON idem_app_tokens (app);

CREATE TABLE idem_worker_tokens (
    hash       BLOB    NOT NULL PRIMARY KEY,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

-- +goose Down
DROP TABLE idem_worker_tokens;
DROP TABLE idem_app_tokens;
DROP TABLE idem_apps;
