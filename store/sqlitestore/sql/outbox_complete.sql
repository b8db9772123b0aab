-- CompleteIntent: fenced move to done with the HTTP status. For a stream's
-- row, trigger idem_outbox_next releases the stream's next row.
UPDATE idem_outbox
SET state = 3, hold = 0, status = :status, done_at = :done_at, lease_until = 0
WHERE id = :id AND state = 2 AND epoch = :epoch AND owner = :owner
