-- ListGaps of one stream: oldest first (id breaks ties in insertion
-- order), in the order of the stream index.
SELECT source, subject, from_seq, to_seq, delta, first_seen
FROM idem_gaps
WHERE source = :source AND subject = :subject
ORDER BY first_seen, id
LIMIT :limit
