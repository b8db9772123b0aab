-- ClaimIntents: claim up to limit due intents by increasing id, and return
-- them. Parameters: $1 now, $2 owner, $3 lease_until, $4 limit, $5 the
-- targets to skip (bytea[], never NULL).
--
-- A row is a candidate when it is pending and due (due_at <= now), or in
-- flight with an ended lease (lease_until <= now), through the claim index
-- (see migrations/003_idem_outbox.sql), its target not skipped, and, for a
-- stream row, when no earlier row of its stream (by seq) is pending or in
-- flight: the stream's head. FOR UPDATE SKIP LOCKED passes over rows that
-- another claim holds locked, so concurrent relays never wait on each
-- other and each row goes to one of them. The UPDATE then bumps the epoch
-- and the attempts of the locked rows and puts them in flight.
--
-- Why two relays never hold two rows of one stream in flight (the
-- argument in full is in outbox.go, ClaimIntents):
--   - A row is only claimed when this statement's snapshot shows every
--     earlier row of its stream done or dead. Both are final (RequeueIntent
--     aside), and an earlier row is committed no later than a later one
--     (see outbox_enqueue.sql), so no snapshot holds a row without the rows
--     before it, and the head judged here stays the head until it ends.
--   - Two claims of the same row: the first locks it; the second skips it
--     while it is locked, and once the first has committed, locks its new
--     version, which PostgreSQL rechecks against the WHERE (EvalPlanQual):
--     in flight under a live lease, it no longer qualifies. The partial
--     index's predicate is kept in the recheck for a FOR UPDATE scan.
--   - While the first claim holds the head locked but has not committed,
--     the second sees the head still pending, so the head's successors
--     fail NOT EXISTS.
--
-- The UPDATE finds the rows by primary key: under READ COMMITTED a row
-- locked in a version newer than the snapshot is followed to that version
-- (ctid, as the sweeps use, would miss it).
WITH claimable AS (
    SELECT o.id
    FROM idem_outbox AS o
    WHERE o.state IN (1, 2)
      AND (CASE WHEN o.state = 1 THEN o.due_at ELSE o.lease_until END) <= $1
      AND o.target <> ALL ($5::bytea[])
      AND (o.stream IS NULL OR NOT EXISTS (
          SELECT 1
          FROM idem_outbox AS e
          WHERE e.stream = o.stream AND e.seq < o.seq AND e.state IN (1, 2)
      ))
    ORDER BY o.id
    LIMIT $4
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE idem_outbox AS o
SET state       = 2,
    epoch       = o.epoch + 1,
    attempts    = o.attempts + 1,
    owner       = $2,
    lease_until = $3
WHERE o.id = ANY (ARRAY(SELECT id FROM claimable))
RETURNING o.id, o.seq, o.epoch, o.due_at, o.lease_until, o.enqueued_at, o.done_at,
          o.attempts, o.status, o.state, o.target, o.stream, o.owner, o.method,
          o.path, o.last_error, o.headers, o.metadata, o.body
