-- OverdueStreams: the streams whose oldest open gap was first seen at or
-- before :before, oldest gap first (then by key, the index's own order).
SELECT source, subject
FROM idem_streams
WHERE gap_since IS NOT NULL AND gap_since <= :before
ORDER BY gap_since, source, subject
LIMIT :limit
