-- Read one record whatever its expiry (inside Claim's transaction).
SELECT fingerprint, state, epoch, owner, unknown, lease_until, expires_at, response
FROM idem_keys
WHERE key = :key
