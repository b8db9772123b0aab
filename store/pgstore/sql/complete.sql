-- Complete and CompleteTx: the holder's fenced move to DONE. Parameters:
-- $1 key, $2 epoch, $3 owner, $4 response, $5 retention (microseconds),
-- $6 now (NULL for the server clock). No row updated means the fence no
-- longer holds.
WITH clock AS MATERIALIZED (
    SELECT coalesce($6::timestamptz, clock_timestamp()) AS now
)
UPDATE idem_keys AS k
SET expires_at  = clock.now + $5::bigint * interval '1 microsecond',
    lease_until = NULL,
    state       = 2,
    unknown     = false,
    response    = $4
FROM clock
WHERE k.key = $1 AND k.epoch = $2 AND k.owner = $3 AND k.state = 1
