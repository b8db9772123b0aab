-- $1 app, $2 execution_id, $3 after, $4 limit.
SELECT seq, type, data, at
FROM idem_execution_events
WHERE app = $1 AND execution_id = $2 AND seq > $3
ORDER BY seq
LIMIT $4
