-- EnableTarget: remove a target's mark. Parameters: $1 target.
DELETE FROM idem_outbox_targets WHERE target = $1
