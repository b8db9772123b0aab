-- RequeueIntent: a dead intent becomes pending again, due at :now, with a
-- new budget of attempts, held behind an earlier pending or in-flight row
-- of its stream or with its disabled target's rows. Its epoch keeps
-- growing, so the fences of its earlier claims stay stale.
UPDATE idem_outbox
SET state = 1, due_at = :now, attempts = 0, done_at = 0,
    hold = CASE
        WHEN stream IS NOT NULL AND EXISTS (
            SELECT 1 FROM idem_outbox AS p INDEXED BY idem_outbox_stream
            WHERE p.stream = idem_outbox.stream AND p.state IN (1, 2) AND p.id < idem_outbox.id
        ) THEN 2
        WHEN target IN (SELECT target FROM idem_outbox_targets) THEN 3
        ELSE 0
    END
WHERE id = :id AND state = 4
