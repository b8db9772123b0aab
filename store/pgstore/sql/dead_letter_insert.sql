-- DeadLetterTx: set the event's inbox row to dead (2), inserting it when it
-- is absent, and store the dead letter under a new id, which it returns.
-- Parameters: $1 source, $2 event_id, $3 stream_source, $4 stream_subject,
-- $5 seq, $6 reason, $7 event, $8 attempts, $9 first_failed, $10
-- last_failed. An inserted inbox row is dated last_failed; it is never
-- swept while it is dead, so that date is only kept for the record.
WITH dead AS (
    INSERT INTO idem_inbox AS i (received_at, status, source, id)
    VALUES ($10, 2, $1, $2)
    ON CONFLICT (source, id) DO UPDATE SET status = 2
    WHERE i.status <> 2
)
INSERT INTO idem_dead_letters
    (first_failed, last_failed, seq, attempts, source, event_id,
     stream_source, stream_subject, reason, event)
VALUES ($9, $10, $5, $8, $1, $2, $3, $4, $6, $7)
RETURNING id
