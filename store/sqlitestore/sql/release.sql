-- Release: fenced move to RELEASED; the next claim takes over at once.
UPDATE idem_keys
SET state = 3, unknown = 0, lease_until = 0
WHERE key = :key AND epoch = :epoch AND owner = :owner AND state = 1
