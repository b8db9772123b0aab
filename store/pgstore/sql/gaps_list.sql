-- ListGaps of every stream: oldest first. Parameters: $1 limit.
SELECT source, subject, from_seq, to_seq, delta, first_seen
FROM idem_gaps
ORDER BY first_seen, id
LIMIT $1
