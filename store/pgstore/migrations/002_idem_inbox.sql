-- +goose Up

-- The inbox and per-stream order tables (store.InboxStore): inbox rows,
-- stream rows, parked events, gaps and dead letters. Package inbox writes
-- them in the caller's transaction, next to its business rows.
--
-- Event and stream keys (CloudEvents source, id and subject) are bytea, as
-- idem_keys.key is: they arrive from other systems, and text would refuse a
-- NUL byte or invalid UTF-8 in one of them, so that event could never be
-- recorded, nor even dead-lettered, and would be redelivered for ever. bytea
-- also compares byte by byte, so listings are ordered the same whatever the
-- database's collation. Times are timestamptz, as in idem_keys, to the
-- microsecond; the caller supplies every one of them.
--
-- As in idem_keys, fixed-width columns come first, widest first, so that no
-- alignment padding is wasted; the variable-length ones follow.

-- idem_inbox holds one row per (source, id) event seen: millions of them
-- under load, so a row is just the key, a status and when it arrived.
CREATE TABLE idem_inbox (
    received_at timestamptz NOT NULL,
    status      smallint    NOT NULL, -- 1 done, 2 dead
    source      bytea       NOT NULL,
    id          bytea       NOT NULL,
    CONSTRAINT idem_inbox_pkey PRIMARY KEY (source, id),
    CONSTRAINT idem_inbox_status CHECK (status IN (1, 2))
);

-- SweepInbox deletes old done rows through this index. Dead rows are never
-- swept (they stay until their dead letter is taken), so they are left out
-- of it: a backlog of dead letters does not slow the sweep down.
CREATE INDEX idem_inbox_sweep ON idem_inbox (received_at) WHERE status = 1;

-- idem_streams holds one row per (source, subject) order stream: its state,
-- opaque to the store, and when its oldest open gap was first seen. A row
-- whose state is NULL is a placeholder LockStreamTx inserted to lock a
-- stream it had never seen (a row lock needs a row); it reads as a new
-- stream and has no gap.
CREATE TABLE idem_streams (
    gap_since timestamptz, -- NULL when the stream has no open gap
    source    bytea NOT NULL,
    subject   bytea NOT NULL,
    state     bytea,       -- NULL until PutStreamTx
    CONSTRAINT idem_streams_pkey PRIMARY KEY (source, subject)
);

-- OverdueStreams finds the streams whose gap is overdue through this index.
-- Only streams with an open gap are in it, a handful at any time, so the
-- writes of every other stream never touch it.
CREATE INDEX idem_streams_overdue ON idem_streams (gap_since) WHERE gap_since IS NOT NULL;

-- idem_parked holds the delta events a stream parks behind a gap, by
-- sequence; the primary key refuses a sequence parked twice.
CREATE TABLE idem_parked (
    seq     bigint NOT NULL,
    source  bytea  NOT NULL,
    subject bytea  NOT NULL,
    event   bytea  NOT NULL,
    CONSTRAINT idem_parked_pkey PRIMARY KEY (source, subject, seq)
);

-- idem_gaps is the log of the runs of sequences streams found missing. id
-- keeps the listing's order stable between gaps first seen at one instant.
CREATE TABLE idem_gaps (
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    first_seen timestamptz NOT NULL,
    from_seq   bigint      NOT NULL,
    to_seq     bigint      NOT NULL,
    delta      boolean     NOT NULL,
    source     bytea       NOT NULL,
    subject    bytea       NOT NULL,
    CONSTRAINT idem_gaps_pkey PRIMARY KEY (id)
);

-- ListGaps of all streams and SweepInbox walk this index, oldest first;
-- ListGaps of one stream walks the next one.
CREATE INDEX idem_gaps_first_seen ON idem_gaps (first_seen, id);
CREATE INDEX idem_gaps_stream ON idem_gaps (source, subject, first_seen, id);

-- idem_dead_letters holds the events that will not be retried by
-- themselves. id comes from an identity sequence, so it increases with
-- every dead letter written; ListDeadLetters pages by it.
CREATE TABLE idem_dead_letters (
    id             bigint      GENERATED ALWAYS AS IDENTITY,
    first_failed   timestamptz NOT NULL,
    last_failed    timestamptz NOT NULL,
    seq            bigint      NOT NULL, -- 0 when the event carries none
    attempts       integer     NOT NULL,
    source         bytea       NOT NULL, -- the event's key
    event_id       bytea       NOT NULL,
    stream_source  bytea       NOT NULL, -- its stream
    stream_subject bytea       NOT NULL,
    reason         text        NOT NULL, -- for the operator
    event          bytea       NOT NULL,
    CONSTRAINT idem_dead_letters_pkey PRIMARY KEY (id)
);

-- +goose Down

DROP TABLE idem_dead_letters;
DROP TABLE idem_gaps;
DROP TABLE idem_parked;
DROP TABLE idem_streams;
DROP TABLE idem_inbox;
