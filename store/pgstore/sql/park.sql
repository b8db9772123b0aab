-- ParkTx: store a parked event under its sequence. Parameters: $1 source,
-- $2 subject, $3 seq, $4 event. A sequence already parked affects no row
-- (the caller reports ErrCorrupt) without failing the statement, so that
-- the transaction stays usable to roll back to a savepoint.
INSERT INTO idem_parked (seq, source, subject, event)
VALUES ($3, $1, $2, $4)
ON CONFLICT (source, subject, seq) DO NOTHING
