-- Release: the holder's fenced move to RELEASED. Parameters: $1 key,
-- $2 epoch, $3 owner. No row updated means the fence no longer holds.
UPDATE idem_keys
SET lease_until = NULL,
    state       = 3,
    unknown     = false
WHERE key = $1 AND epoch = $2 AND owner = $3 AND state = 1
