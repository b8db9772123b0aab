-- SweepIntents: delete up to :limit done intents that ended before
-- :before, oldest first, through idem_outbox_sweep (state = 3 is a literal
-- so that the index applies; pinned as in outbox_claim.sql). Dead rows
-- stay for the operator.
DELETE FROM idem_outbox
WHERE id IN (
    SELECT id FROM idem_outbox INDEXED BY idem_outbox_sweep
    WHERE state = 3 AND done_at < :before
    ORDER BY done_at
    LIMIT :limit
)
