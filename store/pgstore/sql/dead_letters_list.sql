-- ListDeadLetters: a page of dead letters by increasing id. Parameters: $1
-- after (list ids greater than it), $2 limit.
SELECT id, first_failed, last_failed, seq, attempts, source, event_id,
       stream_source, stream_subject, reason, event
FROM idem_dead_letters
WHERE id > $1
ORDER BY id
LIMIT $2
