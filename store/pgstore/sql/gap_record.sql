-- RecordGapTx: append a gap to the log. Parameters: $1 source, $2 subject,
-- $3 from_seq, $4 to_seq, $5 delta, $6 first_seen.
INSERT INTO idem_gaps (first_seen, from_seq, to_seq, delta, source, subject)
VALUES ($6, $3, $4, $5, $1, $2)
