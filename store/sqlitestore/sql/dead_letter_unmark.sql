-- TakeDeadLetterTx: delete the event's inbox row when it is dead (status
-- 2), so that the event can be processed again. A done row (the event was
-- delivered again after its row expired, and handled) stays.
DELETE FROM idem_inbox WHERE source = :source AND id = :id AND status = 2
