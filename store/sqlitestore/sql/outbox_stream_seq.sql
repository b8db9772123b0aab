-- EnqueueTx: give out the next sequence of :stream (1 for a new stream).
-- The caller's transaction holds the write lock, so no other transaction
-- can give out the same one.
INSERT INTO idem_outbox_streams (stream, last_seq)
VALUES (:stream, 1)
ON CONFLICT (stream) DO UPDATE SET last_seq = last_seq + 1
RETURNING last_seq
