-- CompleteIntent: the claim holder's fenced move to done (3). Parameters:
-- $1 id, $2 epoch, $3 owner, $4 the HTTP status, $5 done_at. No row
-- updated means the fence no longer holds.
UPDATE idem_outbox
SET state = 3, status = $4, done_at = $5, lease_until = NULL
WHERE id = $1 AND epoch = $2 AND owner = $3 AND state = 2
