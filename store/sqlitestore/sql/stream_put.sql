-- PutStreamTx: insert or replace the stream's state and the first-seen
-- time of its oldest open gap (NULL when it has none).
INSERT INTO idem_streams (source, subject, state, gap_since)
VALUES (:source, :subject, :state, :gap_since)
ON CONFLICT (source, subject) DO UPDATE SET
    state = excluded.state,
    gap_since = excluded.gap_since
