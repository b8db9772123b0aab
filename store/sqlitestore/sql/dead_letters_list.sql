-- ListDeadLetters: one page of dead letters after :after, by id.
SELECT id, source, event_id, stream_source, stream_subject, seq, reason, event,
    attempts, first_failed, last_failed
FROM idem_dead_letters
WHERE id > :after
ORDER BY id
LIMIT :limit
