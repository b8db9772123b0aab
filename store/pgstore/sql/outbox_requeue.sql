-- RequeueIntent: make a dead (4) intent pending, due now, with a new
-- budget. Parameters: $1 id, $2 now. No row updated: the intent is not
-- dead (or does not exist).
UPDATE idem_outbox
SET state = 1, due_at = $2, attempts = 0, done_at = NULL
WHERE id = $1 AND state = 4
