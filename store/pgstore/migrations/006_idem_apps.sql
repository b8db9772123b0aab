-- +goose Up

-- Applications and worker tokens (store.AppStore). Tokens are stored as
-- their SHA-256 hashes only; an application's callback secrets as text[]
-- (signing needs them).
CREATE TABLE idem_apps (
    created_at   timestamptz NOT NULL,
    disabled     boolean     NOT NULL,
    name         text COLLATE "C" NOT NULL PRIMARY KEY,
    callback_url text        NOT NULL,
    scheme       text        NOT NULL,
    secrets      text[]      NOT NULL
);

-- One row per token hash: a token finds its application by its key.
CREATE TABLE idem_app_tokens (
    hash bytea NOT NULL PRIMARY KEY,
    app  text COLLATE "C" NOT NULL
);

CREATE INDEX idem_app_tokens_app ON idem_app_tokens (app);

CREATE TABLE idem_worker_tokens (
    hash       bytea       NOT NULL PRIMARY KEY,
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE idem_worker_tokens;
DROP TABLE idem_app_tokens;
DROP TABLE idem_apps;
