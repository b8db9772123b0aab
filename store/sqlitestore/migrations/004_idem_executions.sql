-- Tasks, executions and their events (store.ExecutionStore). Times are
-- microseconds since the Unix epoch on the caller's clock, 0 for none, as
-- in the other tables; statuses are store.ExecutionStatus values.
--
-- Every row belongs to an application (app), part of every key, so that
-- one application's ids never reach another's rows. Tasks and executions
-- are WITHOUT ROWID tables keyed by (app, id): they are read by that key.
-- Events are keyed by (app, execution_id, seq), which is also their
-- reading order, and their sequence comes from the execution's last_seq,
-- moved in the transaction that writes the event.

-- +goose Up

CREATE TABLE idem_tasks (
    app               TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    type              TEXT    NOT NULL,
    input             BLOB    NOT NULL,
    external_ref      TEXT    NOT NULL,
    deadline          INTEGER NOT NULL,
    current_execution TEXT    NOT NULL,
    status            INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    PRIMARY KEY (app, id)
) WITHOUT ROWID;

-- ListTasks pages an application's tasks newest first.
CREATE INDEX idem_tasks_list ON idem_tasks (app, created_at, id);

CREATE TABLE idem_executions (
    app         TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    number      INTEGER NOT NULL,
    status      INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    output      BLOB,
    error       TEXT    NOT NULL,
    progress    INTEGER NOT NULL,
    PRIMARY KEY (app, id)
) WITHOUT ROWID;

CREATE TABLE idem_execution_events (
    app          TEXT    NOT NULL,
    execution_id TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    type         TEXT    NOT NULL,
    data         BLOB,
    at           INTEGER NOT NULL,
    PRIMARY KEY (app, execution_id, seq)
);

-- +goose Down
DROP TABLE idem_execution_events;
DROP TABLE idem_executions;
DROP TABLE idem_tasks;
