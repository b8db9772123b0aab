-- DisableTarget, after the mark: hold the target's pending rows in the
-- claim's walk with its other held rows. One pass over the walk (its rows
-- are read for their target), once per disabled target; the rows waiting
-- or behind their stream join when they would join the walk.
UPDATE idem_outbox
SET hold = 3
WHERE id IN (
    SELECT id FROM idem_outbox INDEXED BY idem_outbox_claim
    WHERE state IN (1, 2) AND hold = 0 AND state = 1 AND target = :target
)
