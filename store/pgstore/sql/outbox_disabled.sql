-- DisabledTargets: the disabled targets, in byte order.
SELECT target FROM idem_outbox_targets ORDER BY target
