-- ClaimStepTx: the first executing step of the worker's types (a JSON
-- array) whose lease ended and whose type is repeatable; few rows, walked
-- by idem_steps_executing.
SELECT app, id, due_at FROM idem_steps
WHERE status = 3 AND lease_until <= :now AND once = 0 AND cancel_requested = 0
  AND type IN (SELECT value FROM json_each(:types))
ORDER BY due_at, id
LIMIT 1
