-- ParkTx: store a parked event; nothing when the sequence is parked
-- already, which the caller reports as corruption.
INSERT INTO idem_parked (source, subject, seq, event)
VALUES (:source, :subject, :seq, :event)
ON CONFLICT (source, subject, seq) DO NOTHING
