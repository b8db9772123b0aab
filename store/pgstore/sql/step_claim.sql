-- ClaimStepTx: the oldest claimable step of the worker's types, due
-- first, then by id: dispatched and due, or executing with its lease ended
-- when its type is repeatable; never one whose cancel was asked. FOR
-- UPDATE SKIP LOCKED: concurrent claims never wait on each other, and a
-- step goes to one of them (a row another claim just took is rechecked on
-- its new version, which no longer qualifies).
-- $1 types, $2 now, $3 owner, $4 lease_until.
WITH c AS (
    SELECT app, id FROM idem_steps
    WHERE NOT cancel_requested
      AND type = ANY($1::text[])
      AND ((status = 2 AND due_at <= $2) OR (status = 3 AND NOT once AND lease_until <= $2))
    ORDER BY due_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE idem_steps s
SET status = 3, epoch = s.epoch + 1, attempts = s.attempts + 1, owner = $3, lease_until = $4
FROM c
WHERE s.app = c.app AND s.id = c.id
RETURNING s.app, s.id, s.execution_id, s.name, s.type, s.once, s.status, s.epoch, s.attempts, s.owner, s.lease_until,
          s.due_at, s.cancel_requested, s.output, s.error, s.idempotency_key, s.created_at
