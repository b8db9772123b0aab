-- Steps (store.StepStore): the units workers claim, each under a lease
-- and an epoch. Times are microseconds since the Unix epoch on the
-- caller's clock, 0 for none; statuses are store.StepStatus values
-- (2 dispatched, 3 executing); booleans are integers.

-- +goose Up

CREATE TABLE idem_steps (
    app              TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    execution_id     TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    type             TEXT    NOT NULL,
    once             INTEGER NOT NULL,
    status           INTEGER NOT NULL,
    epoch            INTEGER NOT NULL,
    attempts         INTEGER NOT NULL,
    owner            TEXT    NOT NULL,
    lease_until      INTEGER NOT NULL,
    due_at           INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL,
    output           BLOB,
    error            TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    PRIMARY KEY (app, id)
) WITHOUT ROWID;

-- ClaimStepTx walks the dispatched steps of a type, due first, and the
-- executing ones by the end of their lease; ExpiredSteps walks the latter
-- too. Partial, so that finished steps weigh on neither.
CREATE INDEX idem_steps_dispatched ON idem_steps (type, due_at, id) WHERE status = 2 AND cancel_requested = 0;
CREATE INDEX idem_steps_executing ON idem_steps (lease_until, id) WHERE status = 3;

-- ListSteps reads an execution's steps in creation order.
CREATE INDEX idem_steps_execution ON idem_steps (app, execution_id, created_at, id);

-- +goose Down
DROP TABLE idem_steps;
