-- RecordEventAtCommitTx: insert the event's inbox row as done (1), queued
-- to go out with the transaction's COMMIT. Parameters: $1 source, $2 id,
-- $3 received_at. Its only answer is an error: when the row exists, the
-- primary key fails it (23505 on idem_inbox_pkey; a transaction still
-- recording the key is waited for first), which the store reads as
-- store.ErrDuplicate, and the transaction rolls back whole.
INSERT INTO idem_inbox (received_at, status, source, id)
VALUES ($3, 1, $1, $2)
