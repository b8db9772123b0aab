-- SweepInbox: delete up to :limit gap records first seen before :before,
-- oldest first.
DELETE FROM idem_gaps
WHERE id IN (
    SELECT id FROM idem_gaps
    WHERE first_seen < :before
    ORDER BY first_seen
    LIMIT :limit
)
