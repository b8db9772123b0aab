-- An execution's event, with the sequence its execution's last_seq was
-- just moved to in the same transaction.
INSERT INTO idem_execution_events (app, execution_id, seq, type, data, at)
VALUES (:app, :execution_id, :seq, :type, :data, :at)
