-- ListIntents of pending, in-flight or dead rows: one page after :after,
-- by id, through idem_outbox_state (hence its WHERE repeated literally;
-- pinned as in outbox_claim.sql).
SELECT id, target, method, path, body, headers, metadata, stream, seq, state, attempts,
    due_at, epoch, owner, lease_until, last_error, status, enqueued_at, done_at
FROM idem_outbox INDEXED BY idem_outbox_state
WHERE state <> 3 AND state = :state AND id > :after
ORDER BY id
LIMIT :limit
