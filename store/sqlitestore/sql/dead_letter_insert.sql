-- DeadLetterTx: store the dead letter under a new id (AUTOINCREMENT: ids
-- grow and are never reused).
INSERT INTO idem_dead_letters (
    source, event_id, stream_source, stream_subject, seq, reason, event,
    attempts, first_failed, last_failed
) VALUES (
    :source, :event_id, :stream_source, :stream_subject, :seq, :reason, :event,
    :attempts, :first_failed, :last_failed
)
RETURNING id
