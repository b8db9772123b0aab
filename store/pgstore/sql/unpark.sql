-- UnparkTx: delete parked events of a stream and return them. Parameters:
-- $1 source, $2 subject, $3 the sequences (bigint[]). The caller puts them
-- in the order it asked for and reports the missing ones.
DELETE FROM idem_parked
WHERE source = $1 AND subject = $2 AND seq = ANY ($3::bigint[])
RETURNING seq, event
