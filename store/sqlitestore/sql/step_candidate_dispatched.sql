-- ClaimStepTx: the first due dispatched step of one type, in the order of
-- idem_steps_dispatched (type, due_at, id): one index seek, whatever the
-- backlog.
SELECT app, id, due_at FROM idem_steps
WHERE status = 2 AND cancel_requested = 0 AND type = :type AND due_at <= :now
ORDER BY due_at, id
LIMIT 1
