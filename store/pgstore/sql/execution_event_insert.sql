-- An execution's event, with the sequence its execution's last_seq was
-- just moved to in the same transaction.
-- $1 app, $2 execution_id, $3 seq, $4 type, $5 data, $6 at.
INSERT INTO idem_execution_events (app, execution_id, seq, type, data, at)
VALUES ($1, $2, $3, $4, $5, $6)
