-- RecordEventTx: insert the inbox row as done (status 1), or change
-- nothing when the event was seen before (then inbox_status.sql reads it).
INSERT INTO idem_inbox (source, id, status, received_at)
VALUES (:source, :id, 1, :received_at)
ON CONFLICT (source, id) DO NOTHING
