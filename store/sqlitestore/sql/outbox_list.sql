-- ListIntents of done rows (and of states that no row has): one page
-- after :after, by id, through the table itself. Done rows are most of
-- the table, so the walk finds them densely. NOT INDEXED keeps the
-- planner off the sweep index, which statistics taken while there were few
-- done rows could make it pick, then sort all of them by id.
SELECT id, target, method, path, body, headers, metadata, stream, seq, state, attempts,
    due_at, epoch, owner, lease_until, last_error, status, enqueued_at, done_at
FROM idem_outbox NOT INDEXED
WHERE state = :state AND id > :after
ORDER BY id
LIMIT :limit
