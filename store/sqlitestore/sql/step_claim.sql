-- ClaimStepTx: the oldest claimable step of the worker's types (a JSON
-- array), due first, then by id: dispatched and due, or executing with its
-- lease ended when its type is repeatable; never one whose cancel was
-- asked. SQLite has one writer, so no other claim runs between the choice
-- and the update.
UPDATE idem_steps
SET status = 3, epoch = epoch + 1, attempts = attempts + 1, owner = :owner, lease_until = :lease_until
WHERE (app, id) = (
    SELECT app, id FROM idem_steps
    WHERE cancel_requested = 0
      AND type IN (SELECT value FROM json_each(:types))
      AND ((status = 2 AND due_at <= :now) OR (status = 3 AND once = 0 AND lease_until <= :now))
    ORDER BY due_at, id
    LIMIT 1
)
RETURNING app, id, execution_id, name, type, once, status, epoch, attempts, owner, lease_until, due_at, cancel_requested, output, error, idempotency_key, created_at
