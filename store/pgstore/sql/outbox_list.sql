-- ListIntents: a page of intents in one state by increasing id.
-- Parameters: $1 state, $2 after (list ids greater than it), $3 limit.
--
-- ListIntents runs it unprepared, so that every run is planned for its
-- state: dead rows page through their partial index, live ones through the
-- claim index, done ones (the bulk of the table) through the primary key.
-- A generic plan, which does not know $1, can use none of the partial
-- indexes, and would pass over every done row ahead of the first live one.
SELECT id, seq, epoch, due_at, lease_until, enqueued_at, done_at, attempts,
       status, state, target, stream, owner, method, path, last_error,
       headers, metadata, body
FROM idem_outbox
WHERE state = $1 AND id > $2
ORDER BY id
LIMIT $3
