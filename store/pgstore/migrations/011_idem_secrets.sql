-- +goose Up

-- Applications' secrets (store.SecretStore): the values workflows'
-- headers name.
CREATE TABLE idem_secrets (
    updated_at timestamptz NOT NULL,
    app        text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    value      bytea       NOT NULL,
    PRIMARY KEY (app, name)
);

-- +goose Down
DROP TABLE idem_secrets;
