-- Sweep: delete up to :limit expired records that hold no live lease,
-- oldest expiry first, through the expires_at index. SQLite's
-- DELETE ... LIMIT is a compile-time option, hence the subquery.
DELETE FROM idem_keys
WHERE rowid IN (
    SELECT rowid FROM idem_keys
    WHERE expires_at <= :now
      AND NOT (state = 1 AND lease_until > :now)
    ORDER BY expires_at
    LIMIT :limit
)
