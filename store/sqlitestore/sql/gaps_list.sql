-- ListGaps of every stream: oldest first (id breaks ties in insertion
-- order), in the order of the first_seen index.
SELECT source, subject, from_seq, to_seq, delta, first_seen
FROM idem_gaps
ORDER BY first_seen, id
LIMIT :limit
