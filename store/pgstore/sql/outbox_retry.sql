-- RetryIntent: the claim holder's fenced move back to pending (1).
-- Parameters: $1 id, $2 epoch, $3 owner, $4 due_at, $5 last_error. No row
-- updated means the fence no longer holds.
UPDATE idem_outbox
SET state = 1, due_at = $4, last_error = $5, lease_until = NULL
WHERE id = $1 AND epoch = $2 AND owner = $3 AND state = 2
