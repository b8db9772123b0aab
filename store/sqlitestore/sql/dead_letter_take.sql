-- TakeDeadLetterTx: delete the dead letter and return it.
DELETE FROM idem_dead_letters WHERE id = :id
RETURNING id, source, event_id, stream_source, stream_subject, seq, reason, event,
    attempts, first_failed, last_failed
