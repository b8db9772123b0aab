-- EnableTarget, after removing the mark: the target's held rows wait for
-- their due time again; the next claims move them into the walk.
UPDATE idem_outbox
SET hold = 1
WHERE id IN (
    SELECT id FROM idem_outbox INDEXED BY idem_outbox_disabled
    WHERE hold = 3 AND target = :target
)
