-- Claim: grant the key or report the record that prevents it, in one
-- statement and one round trip. Parameters: $1 key, $2 fingerprint, $3
-- owner, $4 lease and $5 retention (microseconds), $6 now (NULL for the
-- server clock). claimable(r) below means: r is past expires_at, or
-- released, or processing with the same fingerprint and a lease that has
-- ended.
--
--   seen     a plain read of the record when it is NOT claimable: replays,
--            conflicts and in-flight duplicates are answered by it, as of
--            the statement's snapshot (the claim's linearization point),
--            and then nothing is written or locked.
--   claimed  otherwise: insert a fresh record, or take the existing one
--            over when it is (still) claimable, both in the ON CONFLICT
--            upsert.
--   locked   when the upsert found a row that is not claimable (it changed
--            after the snapshot): ON CONFLICT has locked that row, so
--            reading it with a row lock (which follows it to its latest
--            version under READ COMMITTED) returns exactly the version
--            that was judged.
--
-- If locked finds nothing (the row was inserted after the statement's
-- snapshot, so no version of it is visible), the statement returns no row
-- and the caller runs it again: the new snapshot sees the row.
WITH clock AS MATERIALIZED (
    SELECT coalesce($6::timestamptz, clock_timestamp()) AS now
),
seen AS MATERIALIZED (
    SELECT k.*
    FROM idem_keys AS k, clock
    WHERE k.key = $1
      AND NOT (k.expires_at <= clock.now
               OR k.state = 3
               OR (k.state = 1 AND k.fingerprint = $2 AND k.lease_until <= clock.now))
),
claimed AS (
    INSERT INTO idem_keys AS k
        (epoch, expires_at, lease_until, state, unknown, key, fingerprint, owner, response)
    SELECT 1,
           clock.now + $5::bigint * interval '1 microsecond',
           clock.now + $4::bigint * interval '1 microsecond',
           1, false, $1, $2, $3, NULL
    FROM clock
    WHERE NOT EXISTS (SELECT 1 FROM seen)
    ON CONFLICT (key) DO UPDATE SET
        epoch       = k.epoch + 1,
        expires_at  = excluded.expires_at,
        lease_until = excluded.lease_until,
        state       = 1,
        unknown     = false,
        fingerprint = excluded.fingerprint,
        owner       = excluded.owner,
        response    = NULL
    WHERE k.expires_at <= (SELECT now FROM clock)
       OR k.state = 3
       OR (k.state = 1 AND k.fingerprint = excluded.fingerprint AND k.lease_until <= (SELECT now FROM clock))
    RETURNING k.*
),
locked AS (
    SELECT k.*
    FROM idem_keys AS k
    WHERE k.key = $1
      AND NOT EXISTS (SELECT 1 FROM claimed)
      AND NOT EXISTS (SELECT 1 FROM seen)
    FOR SHARE
)
SELECT false, s.fingerprint, s.state, s.unknown, s.epoch, s.owner, s.lease_until, s.expires_at, s.response, clock.now
FROM seen AS s, clock
UNION ALL
SELECT true, c.fingerprint, c.state, c.unknown, c.epoch, c.owner, c.lease_until, c.expires_at, c.response, clock.now
FROM claimed AS c, clock
UNION ALL
SELECT false, l.fingerprint, l.state, l.unknown, l.epoch, l.owner, l.lease_until, l.expires_at, l.response, clock.now
FROM locked AS l, clock
