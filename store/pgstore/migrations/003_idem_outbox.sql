-- +goose Up

-- The outbox tables (store.OutboxStore): the outbound intents, the last
-- sequence of each ordered stream, and the disabled targets. EnqueueTx
-- writes an intent in the caller's transaction, next to its business rows;
-- relays claim, deliver and settle them afterwards.
--
-- As in 002, identifiers that come from outside (target and stream names,
-- relay owner tokens) are bytea, so that any byte string can be stored and
-- they compare byte by byte whatever the collation; the request's method
-- and path and the last error are text, and headers and metadata jsonb, for
-- the operator reading the table. Times are timestamptz, to the
-- microsecond; the caller supplies every one of them. Fixed-width columns
-- come first, widest first, then the variable-length ones.

-- idem_outbox holds one row per intent. id comes from an identity
-- sequence, so it increases in enqueue order (not commit order); claims
-- and listings go by it. state: 1 pending, 2 in flight, 3 done, 4 dead
-- (store.IntentState). A stream row has both stream and seq; a plain row
-- neither.
CREATE TABLE idem_outbox (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    seq         bigint,                -- the row's place in its stream
    epoch       bigint      NOT NULL DEFAULT 0,
    due_at      timestamptz NOT NULL,
    lease_until timestamptz,           -- in flight only
    enqueued_at timestamptz NOT NULL,
    done_at     timestamptz,           -- done or dead only
    attempts    integer     NOT NULL DEFAULT 0,
    status      integer     NOT NULL DEFAULT 0, -- the final HTTP status
    state       smallint    NOT NULL DEFAULT 1,
    target      bytea       NOT NULL,
    stream      bytea,
    owner       bytea       NOT NULL DEFAULT ''::bytea,
    method      text        NOT NULL,
    path        text        NOT NULL,
    last_error  text        NOT NULL DEFAULT '',
    headers     jsonb,
    metadata    jsonb,
    body        bytea       NOT NULL,
    CONSTRAINT idem_outbox_pkey PRIMARY KEY (id),
    CONSTRAINT idem_outbox_state CHECK (state IN (1, 2, 3, 4)),
    CONSTRAINT idem_outbox_stream_seq CHECK ((stream IS NULL) = (seq IS NULL)),
    CONSTRAINT idem_outbox_lease CHECK ((state = 2) = (lease_until IS NOT NULL))
);

-- ClaimIntents walks this index in id order. It holds only the live rows
-- (pending and in flight), and its second column is the time the row
-- becomes claimable (due_at when pending, lease_until when in flight), so
-- that rows not yet due and rows under a live lease are passed over in the
-- index, without reading the table; done and dead rows, however many, are
-- not in it at all.
CREATE INDEX idem_outbox_claim ON idem_outbox
    (id, (CASE WHEN state = 1 THEN due_at ELSE lease_until END))
    WHERE state IN (1, 2);

-- The stream head rule (a stream row is claimable only when no earlier row
-- of its stream is live) probes this index once per candidate stream row.
CREATE INDEX idem_outbox_stream ON idem_outbox (stream, seq) WHERE state IN (1, 2);

-- SweepIntents deletes old done rows through this index.
CREATE INDEX idem_outbox_sweep ON idem_outbox (done_at) WHERE state = 3;

-- ListIntents of dead rows (the operator's listing) pages through this
-- index, however many done rows there are.
CREATE INDEX idem_outbox_dead ON idem_outbox (id) WHERE state = 4;

-- idem_outbox_streams holds each stream's last sequence. EnqueueTx takes
-- the next one with an upsert, whose row lock (held until the transaction
-- ends) serialises the transactions enqueuing to one stream: sequences are
-- gapless and in commit order. A row is kept after its stream's intents
-- are swept, so that a stream never starts again at 1.
CREATE TABLE idem_outbox_streams (
    last_seq bigint NOT NULL,
    stream   bytea  NOT NULL,
    CONSTRAINT idem_outbox_streams_pkey PRIMARY KEY (stream)
);

-- idem_outbox_targets holds the targets disabled after a 410 Gone, until
-- EnableTarget deletes the row.
CREATE TABLE idem_outbox_targets (
    disabled_at timestamptz NOT NULL,
    target      bytea       NOT NULL,
    reason      text        NOT NULL,
    CONSTRAINT idem_outbox_targets_pkey PRIMARY KEY (target)
);

-- +goose Down

DROP TABLE idem_outbox_targets;
DROP TABLE idem_outbox_streams;
DROP TABLE idem_outbox;
