-- PutStreamTx: store the stream's state and the FirstSeen of its oldest
-- open gap (NULL when none). Parameters: $1 source, $2 subject, $3 state,
-- $4 gap_since. The caller normally holds the row's lock already
-- (LockStreamTx); the upsert also serves a caller that did not.
INSERT INTO idem_streams AS s (gap_since, source, subject, state)
VALUES ($4, $1, $2, $3)
ON CONFLICT (source, subject) DO UPDATE SET
    gap_since = excluded.gap_since,
    state     = excluded.state
