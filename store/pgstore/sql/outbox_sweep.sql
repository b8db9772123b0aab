-- SweepIntents: delete up to limit done (3) intents that ended before a
-- time, and return how many. Parameters: $1 before, $2 limit.
--
-- As in sweep_inbox.sql: SKIP LOCKED lets sweepers in several processes
-- work side by side, and the rows are deleted by the physical address
-- (ctid) of the versions locked, a TID scan whatever the planner
-- estimates. A done row is final, so a version locked here is the row's
-- last; the outer DELETE checks the state all the same.
-- ORDER BY done_at walks idem_outbox_sweep whatever the statistics say.
WITH swept AS (
    DELETE FROM idem_outbox
    WHERE ctid = ANY (ARRAY(
        SELECT ctid
        FROM idem_outbox
        WHERE state = 3 AND done_at < $1
        ORDER BY done_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ))
      AND state = 3
    RETURNING 1
)
SELECT count(*) FROM swept
