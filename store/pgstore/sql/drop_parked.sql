-- DropParkedTx: delete parked events of a stream, ignoring the missing
-- ones. Parameters: $1 source, $2 subject, $3 the sequences (bigint[]).
DELETE FROM idem_parked
WHERE source = $1 AND subject = $2 AND seq = ANY ($3::bigint[])
