-- EnableTarget.
DELETE FROM idem_outbox_targets WHERE target = :target
