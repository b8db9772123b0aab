-- RecordEventSetStreamLaterTx: insert the event's inbox row as done (1)
-- and, when the stream holds the state the caller expects, store its new
-- state: a compare and set that takes the stream's row lock in the
-- statement that writes it, queued to go out with the transaction's next
-- statement or its COMMIT (lazyTx, laterWatched). The new state has no
-- open gap (an event in order), so gap_since becomes NULL. Parameters: $1
-- source, $2 id, $3 received_at, $4 stream source, $5 subject, $6
-- expected state, $7 new state.
--
-- Its only answer is an error, which aborts the transaction, so that the
-- COMMIT after it rolls the caller's writes back:
--   - the event's row exists: the primary key fails the insert (23505 on
--     idem_inbox_pkey; a transaction still recording the event is waited
--     for first), which the store reads as store.ErrDuplicate;
--   - the stream holds another state, or has no row: the cast below of
--     'idem-stream-moved:0' to an integer raises
--     invalid_text_representation (22P02) with that text in its message,
--     which the store reads as store.ErrStreamMoved. The cast depends on
--     the UPDATE's rows, so the planner cannot fold it into an error of
--     every run.
--
-- The UPDATE runs after the insert (it reads `inserted`), so the event's
-- row is taken before the stream's lock, in the order the locked path
-- (inbox_record.sql, stream_lock.sql) takes them: two transactions of one
-- event never wait on each other in a cycle. It waits for a transaction
-- holding the stream's lock and then compares the row's latest version,
-- under READ COMMITTED.
WITH inserted AS (
    INSERT INTO idem_inbox (received_at, status, source, id)
    VALUES ($3, 1, $1, $2)
    RETURNING 1
), set_stream AS (
    UPDATE idem_streams
    SET state = $7, gap_since = NULL
    WHERE source = $4 AND subject = $5 AND state = $6
      AND EXISTS (SELECT 1 FROM inserted)
    RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM set_stream) THEN 1
            ELSE ('idem-stream-moved:' || (SELECT count(*) FROM set_stream))::int
       END
