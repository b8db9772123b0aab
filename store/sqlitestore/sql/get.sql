-- Get: the live record for a key.
SELECT fingerprint, state, epoch, owner, unknown, lease_until, expires_at, response
FROM idem_keys
WHERE key = :key AND expires_at > :now
