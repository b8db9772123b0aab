-- CompleteTx: complete.sql inside the caller's transaction, as a statement
-- whose only answer is an error, so that it can go out with the COMMIT in
-- one pipeline (lazyTx, later) instead of in a round trip of its own.
-- Parameters as complete.sql's.
--
-- When the fence no longer holds, nothing is updated and the statement
-- fails: the cast below of 'idem-fenced:0' to an integer raises
-- invalid_text_representation (22P02) with that text in its message, which
-- the store reads as store.ErrFenced (isFenced). The failure aborts the
-- transaction, so the COMMIT after it rolls everything back: the caller's
-- writes never commit without their completion. The cast depends on the
-- UPDATE's rows, so the planner cannot fold it into an error of every run.
WITH clock AS MATERIALIZED (
    SELECT coalesce($6::timestamptz, clock_timestamp()) AS now
),
done AS (
    UPDATE idem_keys AS k
    SET expires_at  = clock.now + $5::bigint * interval '1 microsecond',
        lease_until = NULL,
        state       = 2,
        unknown     = false,
        response    = $4
    FROM clock
    WHERE k.key = $1 AND k.epoch = $2 AND k.owner = $3 AND k.state = 1
    RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM done) THEN 1
            ELSE ('idem-fenced:' || (SELECT count(*) FROM done))::int
       END
