-- MarkUnknown: fenced flag; the lease is kept.
UPDATE idem_keys
SET unknown = 1
WHERE key = :key AND epoch = :epoch AND owner = :owner AND state = 1
