-- SweepInbox: delete up to limit done (1) inbox rows received before a
-- time, and up to limit gap records first seen before it; return how many
-- rows were deleted in all. Parameters: $1 before, $2 limit.
--
-- Dead rows (2) are never deleted here: they stay until their dead letter
-- is taken. SKIP LOCKED lets sweepers in several processes work side by
-- side and never waits on a row a transaction is dead-lettering. The rows
-- are deleted by the physical address (ctid) of the versions locked, a TID
-- scan whatever the planner estimates; under READ COMMITTED a row updated
-- and committed after this statement's snapshot is locked in its latest
-- version, which the snapshot cannot see, so it is left for the next sweep,
-- and the outer DELETE checks the status again all the same.
-- ORDER BY walks the sweep indexes (received_at, first_seen) whatever the
-- statistics say, instead of a scan of the table that finds nothing due.
WITH inbox AS (
    DELETE FROM idem_inbox
    WHERE ctid = ANY (ARRAY(
        SELECT ctid
        FROM idem_inbox
        WHERE status = 1 AND received_at < $1
        ORDER BY received_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ))
      AND status = 1
    RETURNING 1
),
gaps AS (
    DELETE FROM idem_gaps
    WHERE ctid = ANY (ARRAY(
        SELECT ctid
        FROM idem_gaps
        WHERE first_seen < $1
        ORDER BY first_seen, id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
)
SELECT (SELECT count(*) FROM inbox) + (SELECT count(*) FROM gaps)
