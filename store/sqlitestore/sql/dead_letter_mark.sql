-- DeadLetterTx: set the event's inbox row to dead (status 2), inserting it
-- when absent, so that redeliveries are acknowledged without a retry.
INSERT INTO idem_inbox (source, id, status, received_at)
VALUES (:source, :id, 2, :received_at)
ON CONFLICT (source, id) DO UPDATE SET status = 2
