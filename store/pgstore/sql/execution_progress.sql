-- AppendEventTx: the next sequence, and the progress when given (>= 0).
-- $1 app, $2 id, $3 progress.
UPDATE idem_executions
SET last_seq = last_seq + 1,
    progress = CASE WHEN $3 >= 0 THEN $3 ELSE progress END
WHERE app = $1 AND id = $2
RETURNING last_seq
