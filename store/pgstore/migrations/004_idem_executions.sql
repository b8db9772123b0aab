-- +goose Up

-- Tasks, executions and their events (store.ExecutionStore). Every row
-- belongs to an application (app), part of every key, so that one
-- application's ids never reach another's rows. Identifiers are text in
-- the "C" collation, so that they compare and sort byte by byte whatever
-- the database's default; inputs, outputs and event data are bytea, kept
-- exactly as given. Times are timestamptz on the caller's clock, NULL for
-- none. An event's sequence comes from its execution's last_seq, moved by
-- the UPDATE that holds the execution's row lock until the transaction
-- that writes the event ends: so sequences have no gap and no repeat.

CREATE TABLE idem_tasks (
    created_at        timestamptz NOT NULL,
    deadline          timestamptz,
    status            smallint    NOT NULL,
    app               text COLLATE "C" NOT NULL,
    id                text COLLATE "C" NOT NULL,
    type              text        NOT NULL,
    external_ref      text        NOT NULL,
    current_execution text COLLATE "C" NOT NULL,
    input             bytea       NOT NULL,
    PRIMARY KEY (app, id)
);

-- ListTasks pages an application's tasks newest first.
CREATE INDEX idem_tasks_list ON idem_tasks (app, created_at, id);

CREATE TABLE idem_executions (
    last_seq    bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    started_at  timestamptz,
    finished_at timestamptz,
    number      integer     NOT NULL,
    progress    integer     NOT NULL DEFAULT 0,
    status      smallint    NOT NULL,
    app         text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    task_id     text COLLATE "C" NOT NULL,
    error       text        NOT NULL DEFAULT '',
    output      bytea,
    PRIMARY KEY (app, id)
);

CREATE TABLE idem_execution_events (
    seq          bigint      NOT NULL,
    at           timestamptz NOT NULL,
    app          text COLLATE "C" NOT NULL,
    execution_id text COLLATE "C" NOT NULL,
    type         text        NOT NULL,
    data         bytea,
    PRIMARY KEY (app, execution_id, seq)
);

-- +goose Down
DROP TABLE idem_execution_events;
DROP TABLE idem_executions;
DROP TABLE idem_tasks;
