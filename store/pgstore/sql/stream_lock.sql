-- LockStreamTx, first step: lock the stream's row and read its state.
-- Parameters: $1 source, $2 subject. Under READ COMMITTED the row lock
-- waits for a transaction holding it and then returns the row's latest
-- version, so the waiter sees the state the holder stored. No row: the
-- stream is new (see stream_insert.sql).
SELECT state
FROM idem_streams
WHERE source = $1 AND subject = $2
FOR UPDATE
