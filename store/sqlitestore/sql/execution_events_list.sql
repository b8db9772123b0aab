SELECT seq, type, data, at
FROM idem_execution_events
WHERE app = :app AND execution_id = :execution_id AND seq > :after
ORDER BY seq
LIMIT :limit
