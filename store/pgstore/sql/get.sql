-- Get: the live record for a key. Parameters: $1 key, $2 now (NULL for the
-- server clock).
SELECT fingerprint, state, unknown, epoch, owner, lease_until, expires_at, response
FROM idem_keys
WHERE key = $1
  AND expires_at > coalesce($2::timestamptz, clock_timestamp())
