-- Complete: fenced move to DONE with the response.
UPDATE idem_keys
SET state = 2, response = :response, unknown = 0, lease_until = 0, expires_at = :expires_at
WHERE key = :key AND epoch = :epoch AND owner = :owner AND state = 1
