-- OverdueStreams: the streams whose oldest open gap was first seen at or
-- before a time, oldest first, through the partial index on gap_since
-- (placeholder rows and streams without a gap are not in it). Parameters:
-- $1 before, $2 limit.
SELECT source, subject
FROM idem_streams
WHERE gap_since IS NOT NULL AND gap_since <= $1
ORDER BY gap_since, source, subject
LIMIT $2
