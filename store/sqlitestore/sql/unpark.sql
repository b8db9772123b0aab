-- UnparkTx and DropParkedTx: delete the stream's parked events whose
-- sequences are in :seqs, a JSON array (one statement for any number of
-- sequences, each found through the primary key), and return them in no
-- particular order.
DELETE FROM idem_parked
WHERE source = :source AND subject = :subject
  AND seq IN (SELECT value FROM json_each(:seqs))
RETURNING seq, event
