-- GetIntent: one intent. Parameters: $1 id.
SELECT id, seq, epoch, due_at, lease_until, enqueued_at, done_at, attempts,
       status, state, target, stream, owner, method, path, last_error,
       headers, metadata, body
FROM idem_outbox
WHERE id = $1
