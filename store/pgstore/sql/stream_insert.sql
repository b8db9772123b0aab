-- LockStreamTx, second step for a stream without a row: insert a
-- placeholder row (NULL state, no gap), which locks the new stream for the
-- rest of the transaction. Parameters: $1 source, $2 subject.
--
-- A transaction inserting the same stream meanwhile makes this one wait,
-- on the primary key, until it ends: if it rolled back this one inserts;
-- if it committed nothing is inserted (no row affected) and the caller
-- locks the committed row with stream_lock.sql again.
INSERT INTO idem_streams (gap_since, source, subject, state)
VALUES (NULL, $1, $2, NULL)
ON CONFLICT (source, subject) DO NOTHING
