-- ClaimIntents, second statement, in the same write transaction as the
-- first: SQLite admits one writer, so no other claim, in this process or
-- another, can change a row between the choice and the update, and the
-- subquery does not depend on the row being updated, so SQLite runs it
-- once, before the first change. It picks up to :limit claimable rows,
-- oldest id first, from two places:
--   - the walk (idem_outbox_claim, hold = 0), read in id order until
--     :limit rows qualify (in-flight rows are there only once their lease
--     ended: claimed rows wait for it with hold = 1);
--   - the held rows of the disabled targets that :skip does not name
--     (idem_outbox_disabled; a relay skips every disabled target, so
--     this part is normally empty).
-- A row qualifies when it is
--   - due: pending with due_at <= :now, or in flight with a lease that
--     ended (lease_until <= :now: its relay died or stalled);
--   - of a target not in :skip, a JSON array of target names;
--   - outside any stream, or its stream's head: no earlier row of the
--     stream is pending or in flight (idem_outbox_stream). Heads are
--     judged on the rows as they were before the update, so two rows of
--     one stream can never be picked together.
-- The terms repeat the indexes' WHERE literally, so that they apply.
-- INDEXED BY pins the plans: statistics from an ANALYZE (PRAGMA optimize)
-- taken while the table looked otherwise must never turn the claim into a
-- sort of every due row; and the statement fails to prepare, rather than
-- scan, should an index not apply. RETURNING yields the claimed rows, in
-- no particular order.
UPDATE idem_outbox
SET state = 2,
    hold = 1,
    epoch = epoch + 1,
    attempts = attempts + 1,
    owner = :owner,
    lease_until = :lease_until
WHERE id IN (
    SELECT id FROM (
        SELECT id FROM (
            SELECT o.id FROM idem_outbox AS o INDEXED BY idem_outbox_claim
            WHERE o.state IN (1, 2) AND o.hold = 0
              AND ((o.state = 1 AND o.due_at <= :now) OR (o.state = 2 AND o.lease_until <= :now))
              AND o.target NOT IN (SELECT value FROM json_each(:skip))
              AND (o.stream IS NULL OR NOT EXISTS (
                  SELECT 1 FROM idem_outbox AS p INDEXED BY idem_outbox_stream
                  WHERE p.stream = o.stream AND p.state IN (1, 2) AND p.id < o.id
              ))
            ORDER BY o.id
            LIMIT :limit
        )
        UNION ALL
        SELECT d.id FROM idem_outbox AS d INDEXED BY idem_outbox_disabled
        WHERE d.hold = 3
          AND d.target IN (
              SELECT target FROM idem_outbox_targets
              WHERE target NOT IN (SELECT value FROM json_each(:skip))
          )
          AND d.state = 1 AND d.due_at <= :now
          AND (d.stream IS NULL OR NOT EXISTS (
              SELECT 1 FROM idem_outbox AS p INDEXED BY idem_outbox_stream
              WHERE p.stream = d.stream AND p.state IN (1, 2) AND p.id < d.id
          ))
    )
    ORDER BY id
    LIMIT :limit
)
RETURNING id, target, method, path, body, headers, metadata, stream, seq, state, attempts,
    due_at, epoch, owner, lease_until, last_error, status, enqueued_at, done_at
