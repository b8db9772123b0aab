-- TakeDeadLetterTx: delete a dead letter and return it, and delete its
-- event's inbox row only when that row is dead (2), reporting whether it
-- did. Parameters: $1 id. No row returned: there is no such dead letter
-- (or a concurrent take deleted it first: the DELETE waited for it).
--
-- A done inbox row is left alone: the event was delivered again after its
-- row was swept and was handled, so running it again would apply it twice.
WITH taken AS (
    DELETE FROM idem_dead_letters
    WHERE id = $1
    RETURNING id, first_failed, last_failed, seq, attempts, source, event_id,
              stream_source, stream_subject, reason, event
),
undead AS (
    DELETE FROM idem_inbox AS i
    USING taken AS t
    WHERE i.source = t.source AND i.id = t.event_id AND i.status = 2
    RETURNING 1
)
SELECT t.id, t.first_failed, t.last_failed, t.seq, t.attempts, t.source,
       t.event_id, t.stream_source, t.stream_subject, t.reason, t.event,
       EXISTS (SELECT 1 FROM undead)
FROM taken AS t
