-- Extend: fenced new lease end; the record lives at least as long as the
-- lease, so that a live lease is never past the record's expiry.
UPDATE idem_keys
SET lease_until = :lease_until, expires_at = max(expires_at, :lease_until)
WHERE key = :key AND epoch = :epoch AND owner = :owner AND state = 1
