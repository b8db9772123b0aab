-- +goose Up

-- Steps (store.StepStore): the units workers claim, each under a lease
-- and an epoch. Identifiers are text in the "C" collation, as in 004;
-- outputs are bytea, kept as given; times are timestamptz on the caller's
-- clock, NULL for none. status: store.StepStatus values (2 dispatched,
-- 3 executing).
CREATE TABLE idem_steps (
    epoch            bigint      NOT NULL DEFAULT 0,
    lease_until      timestamptz,
    due_at           timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    status           smallint    NOT NULL,
    once             boolean     NOT NULL,
    cancel_requested boolean     NOT NULL DEFAULT false,
    app              text COLLATE "C" NOT NULL,
    id               text COLLATE "C" NOT NULL,
    execution_id     text COLLATE "C" NOT NULL,
    name             text        NOT NULL,
    type             text        NOT NULL,
    owner            text        NOT NULL DEFAULT '',
    error            text        NOT NULL DEFAULT '',
    idempotency_key  text        NOT NULL,
    output           bytea,
    PRIMARY KEY (app, id)
);

-- ClaimStepTx walks the dispatched steps of a type, due first, and the
-- executing ones by the end of their lease; ExpiredSteps walks the latter
-- too. Partial, so that finished steps weigh on neither.
CREATE INDEX idem_steps_dispatched ON idem_steps (type, due_at, id) WHERE status = 2 AND NOT cancel_requested;
CREATE INDEX idem_steps_executing ON idem_steps (lease_until, id) WHERE status = 3;

-- ListSteps reads an execution's steps in creation order.
CREATE INDEX idem_steps_execution ON idem_steps (app, execution_id, created_at, id);

-- +goose Down
DROP TABLE idem_steps;
