-- RetryIntent: fenced move back to pending, due at :due_at, waiting out of
-- the claim's walk until then (the next claim after :due_at moves it in;
-- hold is 1 already, since the claim).
UPDATE idem_outbox
SET state = 1, hold = 1, due_at = :due_at, last_error = :last_error, lease_until = 0
WHERE id = :id AND state = 2 AND epoch = :epoch AND owner = :owner
