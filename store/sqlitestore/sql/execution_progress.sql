-- AppendEventTx: the next sequence, and the progress when given (>= 0).
UPDATE idem_executions
SET last_seq = last_seq + 1,
    progress = CASE WHEN :progress >= 0 THEN :progress ELSE progress END
WHERE app = :app AND id = :id
RETURNING last_seq
