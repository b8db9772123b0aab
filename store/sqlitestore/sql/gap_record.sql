-- RecordGapTx: append a gap to the log.
INSERT INTO idem_gaps (source, subject, from_seq, to_seq, delta, first_seen)
VALUES (:source, :subject, :from_seq, :to_seq, :delta, :first_seen)
