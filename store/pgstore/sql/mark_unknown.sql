-- MarkUnknown: the holder's fenced report that the outcome is unknown; the
-- lease is kept. Parameters: $1 key, $2 epoch, $3 owner. No row updated
-- means the fence no longer holds.
UPDATE idem_keys
SET unknown = true
WHERE key = $1 AND epoch = $2 AND owner = $3 AND state = 1
