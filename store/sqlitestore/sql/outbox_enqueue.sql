-- EnqueueTx: a new pending intent (:stream is NULL outside any stream),
-- held out of the claim's walk (see migration 003) when it has a pending
-- or in-flight row of its stream before it, when its target is disabled,
-- or when it is due after :now, the store's clock.
INSERT INTO idem_outbox (state, hold, target, stream, seq, due_at, enqueued_at, method, path, headers, metadata, body)
VALUES (1,
    CASE
        WHEN :stream IS NOT NULL AND EXISTS (
            SELECT 1 FROM idem_outbox INDEXED BY idem_outbox_stream
            WHERE stream = :stream AND state IN (1, 2)
        ) THEN 2
        WHEN :target IN (SELECT target FROM idem_outbox_targets) THEN 3
        WHEN :due_at > :now THEN 1
        ELSE 0
    END,
    :target, :stream, :seq, :due_at, :enqueued_at, :method, :path, :headers, :metadata, :body)
