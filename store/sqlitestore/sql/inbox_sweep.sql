-- SweepInbox: delete up to :limit done inbox rows received before :before,
-- oldest first, through the partial index of done rows (status = 1 is a
-- literal so that the planner can use it). Dead rows (status 2) stay until
-- their dead letter is taken. SQLite's DELETE ... LIMIT is a compile-time
-- option, hence the subquery.
DELETE FROM idem_inbox
WHERE rowid IN (
    SELECT rowid FROM idem_inbox
    WHERE status = 1 AND received_at < :before
    ORDER BY received_at
    LIMIT :limit
)
