-- Sweep: delete up to limit records past expires_at that hold no live lease.
-- SKIP LOCKED lets several sweepers (one per idem process) work side by side
-- and never waits on a row a claim is taking over; under READ COMMITTED the
-- row lock re-checks each row's latest version, so a record claimed afresh
-- meanwhile is not deleted. ORDER BY expires_at makes the plan walk the
-- expires_at index whatever the statistics say: without it the planner,
-- which cannot know the clock's value, may scan the whole table, every
-- row of it when none is due (the last call of every pass). The keys are
-- deleted as an array, through the primary key: with IN (subquery) the
-- planner may hash the keys and scan the whole table to find them.
-- Parameters:
-- $1 limit, $2 now (NULL for the server clock).
WITH clock AS MATERIALIZED (
    SELECT coalesce($2::timestamptz, clock_timestamp()) AS now
)
DELETE FROM idem_keys
WHERE key = ANY (ARRAY(
    SELECT key
    FROM idem_keys
    WHERE expires_at <= (SELECT now FROM clock)
      AND (state <> 1 OR lease_until <= (SELECT now FROM clock))
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
))
