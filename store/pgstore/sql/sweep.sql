-- Sweep: delete up to limit records past expires_at that hold no live lease.
-- SKIP LOCKED lets several sweepers (one per idem process) work side by side
-- and never waits on a row a claim is taking over; under READ COMMITTED the
-- row lock re-checks each row's latest version, so a record claimed afresh
-- meanwhile is not deleted. Parameters: $1 limit, $2 now (NULL for the
-- server clock).
WITH clock AS MATERIALIZED (
    SELECT coalesce($2::timestamptz, clock_timestamp()) AS now
)
DELETE FROM idem_keys
WHERE key IN (
    SELECT key
    FROM idem_keys
    WHERE expires_at <= (SELECT now FROM clock)
      AND (state <> 1 OR lease_until <= (SELECT now FROM clock))
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
