-- Claim: insert a new record, or take over the existing one when the
-- contract allows it (expired, released, or same fingerprint with an ended
-- lease), in one statement. RETURNING yields a row only when the claim was
-- granted; the conditions are those of store.Store.Claim, in its order.
INSERT INTO idem_keys (key, fingerprint, state, epoch, owner, unknown, lease_until, expires_at, response)
VALUES (:key, :fingerprint, 1, 1, :owner, 0, :lease_until, :expires_at, NULL)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    state       = 1,
    epoch       = idem_keys.epoch + 1,
    owner       = excluded.owner,
    unknown     = 0,
    lease_until = excluded.lease_until,
    expires_at  = excluded.expires_at,
    response    = NULL
WHERE idem_keys.expires_at <= :now
   OR idem_keys.state = 3
   OR (idem_keys.state = 1
       AND idem_keys.fingerprint = excluded.fingerprint
       AND idem_keys.lease_until <= :now)
RETURNING epoch
