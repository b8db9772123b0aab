-- KillIntent: fenced move to dead with the reason. For a stream's row,
-- trigger idem_outbox_next releases the stream's next row.
UPDATE idem_outbox
SET state = 4, hold = 0, last_error = :last_error, done_at = :done_at, lease_until = 0
WHERE id = :id AND state = 2 AND epoch = :epoch AND owner = :owner
