-- Peek: the record for a key when it is NOT claimable, so that Claim answers
-- replays, conflicts and in-flight duplicates with a plain indexed read and
-- runs the claim statement only when it may grant. Parameters: $1 key,
-- $2 fingerprint, $3 now (NULL for the server clock).
--
-- A record that is not claimable at the moment it is read is a correct
-- answer to Claim at that moment: the read is the claim's linearization
-- point. Absent or claimable records return no row.
SELECT k.fingerprint, k.state, k.unknown, k.epoch, k.owner, k.lease_until, k.expires_at, k.response, clock.now
FROM (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now) AS clock, idem_keys AS k
WHERE k.key = $1
  AND NOT (k.expires_at <= clock.now
           OR k.state = 3
           OR (k.state = 1 AND k.fingerprint = $2 AND k.lease_until <= clock.now))
