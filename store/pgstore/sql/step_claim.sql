-- ClaimStepTx: the oldest claimable step of the worker's types, due
-- first, then by id: dispatched and due, or executing with its lease ended
-- when its type is repeatable; never one whose cancel was asked.
--
-- The candidates come from two index walks, so that a claim costs the
-- same whatever the backlog: per type, the first due dispatched steps of
-- idem_steps_dispatched (type, due_at, id) in order (a LATERAL per type:
-- with type = ANY(...) the planner would scan and sort every row); and
-- the executing steps whose lease ended (idem_steps_executing). The oldest
-- candidate is locked FOR UPDATE SKIP LOCKED and rechecked on its current
-- version: concurrent claims never wait on each other, and a step goes to
-- one of them. 64 candidates per walk: more concurrent claimers than that
-- would only see no step and ask again.
-- $1 types, $2 now, $3 owner, $4 lease_until.
WITH cand AS (
    SELECT d.app, d.id FROM unnest($1::text[]) AS k(type), LATERAL (
        SELECT app, id FROM idem_steps
        WHERE status = 2 AND NOT cancel_requested AND type = k.type AND due_at <= $2
        ORDER BY due_at, id
        LIMIT 64
    ) d
    UNION ALL
    (SELECT app, id FROM idem_steps
     WHERE status = 3 AND NOT once AND NOT cancel_requested AND type = ANY($1::text[]) AND lease_until <= $2
     ORDER BY due_at, id
     LIMIT 64)
), c AS (
    SELECT s.app, s.id FROM idem_steps s JOIN cand ON s.app = cand.app AND s.id = cand.id
    WHERE NOT s.cancel_requested
      AND s.type = ANY($1::text[])
      AND ((s.status = 2 AND s.due_at <= $2) OR (s.status = 3 AND NOT s.once AND s.lease_until <= $2))
    ORDER BY s.due_at, s.id
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE idem_steps s
SET status = 3, epoch = s.epoch + 1, attempts = s.attempts + 1, owner = $3, lease_until = $4
FROM c
WHERE s.app = c.app AND s.id = c.id
RETURNING s.app, s.id, s.execution_id, s.name, s.type, s.once, s.status, s.epoch, s.attempts, s.owner, s.lease_until,
          s.due_at, s.cancel_requested, s.output, s.error, s.idempotency_key, s.created_at
