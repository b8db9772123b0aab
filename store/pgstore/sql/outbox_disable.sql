-- DisableTarget: mark a target disabled, or update the mark's reason and
-- time. Parameters: $1 target, $2 reason, $3 disabled_at.
INSERT INTO idem_outbox_targets (disabled_at, target, reason)
VALUES ($3, $1, $2)
ON CONFLICT (target) DO UPDATE SET disabled_at = excluded.disabled_at, reason = excluded.reason
