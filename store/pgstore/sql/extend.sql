-- Extend: the holder's fenced lease renewal; expires_at is raised to the new
-- lease end if it was earlier, so that a live lease never outlives its
-- record. Parameters: $1 key, $2 epoch, $3 owner, $4 lease (microseconds),
-- $5 now (NULL for the server clock). Returns the new lease end; no row
-- means the fence no longer holds.
WITH lease AS MATERIALIZED (
    SELECT coalesce($5::timestamptz, clock_timestamp())
           + $4::bigint * interval '1 microsecond' AS until
)
UPDATE idem_keys AS k
SET lease_until = lease.until,
    expires_at  = greatest(k.expires_at, lease.until)
FROM lease
WHERE k.key = $1 AND k.epoch = $2 AND k.owner = $3 AND k.state = 1
RETURNING k.lease_until
