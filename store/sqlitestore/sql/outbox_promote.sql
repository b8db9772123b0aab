-- ClaimIntents, first statement: move up to :batch rows whose wait ended
-- into the claim's walk, oldest first: pending rows due by :now (or, when
-- their target is disabled, among its held rows), and in-flight rows whose
-- lease ended by :now. The two indexes are read in time order and merged,
-- so the statement reads no more than :batch entries of each.
UPDATE idem_outbox
SET hold = CASE WHEN state = 1 AND target IN (SELECT target FROM idem_outbox_targets) THEN 3 ELSE 0 END
WHERE id IN (
    SELECT id FROM (
        SELECT id, due_at AS at FROM idem_outbox INDEXED BY idem_outbox_wait
        WHERE state = 1 AND hold = 1 AND due_at <= :now
        UNION ALL
        SELECT id, lease_until AS at FROM idem_outbox INDEXED BY idem_outbox_lease
        WHERE state = 2 AND hold = 1 AND lease_until <= :now
        ORDER BY at
        LIMIT :batch
    )
)
