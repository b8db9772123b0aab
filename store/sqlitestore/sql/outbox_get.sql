-- GetIntent.
SELECT id, target, method, path, body, headers, metadata, stream, seq, state, attempts,
    due_at, epoch, owner, lease_until, last_error, status, enqueued_at, done_at
FROM idem_outbox
WHERE id = :id
