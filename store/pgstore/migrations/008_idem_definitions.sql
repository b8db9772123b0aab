-- +goose Up

-- Versioned definitions of applications: workflows and connections
-- (store.DefinitionStore). A version, once written, is never changed.
CREATE TABLE idem_definitions (
    version    integer     NOT NULL,
    created_at timestamptz NOT NULL,
    app        text COLLATE "C" NOT NULL,
    kind       text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    body       bytea       NOT NULL,
    PRIMARY KEY (app, kind, name, version)
);

-- +goose Down
DROP TABLE idem_definitions;
