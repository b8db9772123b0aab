-- ClaimStepsTx: the $5 oldest claimable steps of the worker's types, due
-- first, then by id: dispatched and due, or executing with its lease ended
-- when its type is repeatable; never one whose cancel was asked.
--
-- The candidates are found and locked by index walks that stop at the $5th
-- row they can lock, FOR UPDATE SKIP LOCKED, so that a claim costs the
-- same whatever the backlog and concurrent claims never wait on each
-- other: per type, the first due dispatched steps of idem_steps_dispatched
-- (type, due_at, id) (a LATERAL per type: with type = ANY(...) the planner
-- would scan and sort every row); and the first executing steps whose lease
-- ended, from idem_steps_executing (lease_until, id). A row updated by a
-- claim that committed meanwhile is rechecked on its new version and
-- passed over. The $5 oldest candidates are claimed; the others stay locked
-- until the transaction ends, and are not changed. There is no join
-- between a walk and the table: its plan would hang on statistics, and a
-- nested loop over a young table's stale ones rescans the walk per row.
-- The claimed rows are updated by their ctid (a TID scan), never by a
-- join with c, whose plan hangs on statistics (a generic plan, not
-- knowing c's size, hashed the whole table). A row's ctid cannot change
-- meanwhile: this statement holds its lock, and the walk returned the
-- version it locked. When that version was committed after this
-- statement began (a claim's update, rechecked and still claimable), the
-- update cannot see it and passes it over: the step stays as it was, for
-- the next claim. Nothing is ever claimed twice.
-- ClaimStepsTx runs this statement with a generic plan, so that a claim
-- is not planned afresh every time (planning cost as much as running it).
-- The rows come back in no order; the caller sorts them.
-- $1 types, $2 now, $3 owner, $4 lease_until, $5 limit.
WITH dispatched AS (
    SELECT d.ctid, d.id, d.due_at FROM unnest($1::text[]) AS k(type), LATERAL (
        SELECT ctid, id, due_at FROM idem_steps
        WHERE status = 2 AND NOT cancel_requested AND type = k.type AND due_at <= $2
        ORDER BY due_at, id
        LIMIT $5
        FOR UPDATE SKIP LOCKED
    ) d
), expired AS (
    SELECT ctid, id, due_at FROM idem_steps
    WHERE status = 3 AND NOT once AND NOT cancel_requested AND type = ANY($1::text[]) AND lease_until <= $2
    ORDER BY lease_until, id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
), c AS (
    SELECT ctid FROM (SELECT * FROM dispatched UNION ALL SELECT * FROM expired) cand
    ORDER BY due_at, id
    LIMIT $5
)
UPDATE idem_steps s
SET status = 3, epoch = s.epoch + 1, attempts = s.attempts + 1, owner = $3, lease_until = $4
WHERE s.ctid = ANY(ARRAY(SELECT ctid FROM c))
RETURNING s.app, s.id, s.execution_id, s.name, s.type, s.once, s.status, s.epoch, s.attempts, s.owner, s.lease_until,
          s.due_at, s.cancel_requested, s.output, s.error, s.idempotency_key, s.created_at
