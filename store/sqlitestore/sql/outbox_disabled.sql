-- DisabledTargets, by name.
SELECT target FROM idem_outbox_targets ORDER BY target
