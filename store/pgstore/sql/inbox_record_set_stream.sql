-- RecordEventSetStreamTx: record the event as inbox_record.sql does and,
-- only when this statement inserted its row, store the stream's new state
-- if the stream still holds the state the caller expects: a compare and
-- set that takes the stream's row lock in the statement that writes it,
-- where LockStreamTx and PutStreamTx are a lock and a write, two
-- statements. When the stream holds another state, the caller locks it
-- with LockStreamTx next (a third CTE that locks it here cost this
-- statement a tenth of its time when it sets the stream, the common
-- case). The new state has no open gap (an event in order), so gap_since
-- becomes NULL. Parameters: $1 source, $2 id, $3 received_at, $4 stream
-- source, $5 subject, $6 expected state, $7 new state.
-- Returns the status, whether this statement inserted the row, and
-- whether it set the stream; no row as inbox_record.sql (run it again).
--
-- The update waits for a transaction holding the stream's lock and then
-- compares the row's latest version, under READ COMMITTED: a stream that
-- transaction moved on is not set (the row stays locked, as an update that
-- waited leaves it). A duplicate (no row inserted) leaves the stream
-- alone: the uncorrelated EXISTS is evaluated once, before the update
-- reads a row.
WITH inserted AS (
    INSERT INTO idem_inbox (received_at, status, source, id)
    VALUES ($3, 1, $1, $2)
    ON CONFLICT (source, id) DO NOTHING
    RETURNING status
), set_stream AS (
    UPDATE idem_streams
    SET state = $7, gap_since = NULL
    WHERE source = $4 AND subject = $5 AND state = $6
      AND EXISTS (SELECT 1 FROM inserted)
    RETURNING 1
)
SELECT status, true, EXISTS (SELECT 1 FROM set_stream) FROM inserted
UNION ALL
SELECT status, false, false
FROM idem_inbox
WHERE source = $1 AND id = $2
  AND NOT EXISTS (SELECT 1 FROM inserted)
