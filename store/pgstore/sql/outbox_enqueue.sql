-- EnqueueTx: insert a pending intent and, for a stream, take the stream's
-- next sequence; queue the wake-up for the relays. Parameters: $1 target,
-- $2 method, $3 path, $4 body, $5 headers, $6 metadata (jsonb, NULL for a
-- nil map), $7 stream (NULL for none), $8 due_at, $9 enqueued_at. Returns
-- the id and the sequence (0 without a stream).
--
-- The sequence is an upsert of the stream's row, which stays locked until
-- the caller's transaction ends: a second transaction enqueuing to the
-- stream waits on it, then takes the next sequence (or this one, if the
-- first rolled back). So a stream's sequences are gapless and follow
-- commit order, and every row of a stream that is not committed yet has a
-- higher sequence than all its committed rows. ids do not follow commit
-- order, and within a stream not even sequence order (an id may be drawn
-- before the wait on the stream's row): order streams by seq, never by id.
--
-- pg_notify is sent when the transaction commits, and not at all when it
-- rolls back; the notifications of one transaction are coalesced into one.
-- The payload is the schema, so that a listener ignores the intents of
-- stores in other schemas of the database (channels are per database).
WITH s AS (
    INSERT INTO idem_outbox_streams AS s (stream, last_seq)
    SELECT $7::bytea, 1
    WHERE $7::bytea IS NOT NULL
    ON CONFLICT (stream) DO UPDATE SET last_seq = s.last_seq + 1
    RETURNING last_seq
),
o AS (
    INSERT INTO idem_outbox
        (seq, due_at, enqueued_at, target, stream, method, path, headers, metadata, body)
    VALUES ((SELECT last_seq FROM s), $8, $9, $1, $7::bytea, $2, $3, $5, $6, $4)
    RETURNING id, seq
)
SELECT o.id, coalesce(o.seq, 0)
FROM o, (SELECT pg_notify('idem_outbox', current_schema())) AS n
