-- DisableTarget: mark the target disabled, or renew the mark's reason.
INSERT INTO idem_outbox_targets (target, reason, disabled_at)
VALUES (:target, :reason, :disabled_at)
ON CONFLICT (target) DO UPDATE SET
    reason = excluded.reason,
    disabled_at = excluded.disabled_at
