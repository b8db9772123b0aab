-- ListGaps of one stream: oldest first. Parameters: $1 source, $2 subject,
-- $3 limit.
SELECT source, subject, from_seq, to_seq, delta, first_seen
FROM idem_gaps
WHERE source = $1 AND subject = $2
ORDER BY first_seen, id
LIMIT $3
