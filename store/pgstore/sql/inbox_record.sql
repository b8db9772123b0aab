-- RecordEventTx: insert the event's inbox row as done (1), or read the row
-- that is already there. Parameters: $1 source, $2 id, $3 received_at.
-- Returns the status and whether this statement inserted the row.
--
-- The primary key serialises two transactions recording one key: the
-- second INSERT waits until the first transaction ends, then conflicts (it
-- committed) or inserts (it rolled back). A row committed after this
-- statement took its snapshot conflicts but cannot be read here, so the
-- statement returns no row and the caller runs it again: the next
-- snapshot sees it. A row already there is answered in one statement.
WITH inserted AS (
    INSERT INTO idem_inbox (received_at, status, source, id)
    VALUES ($3, 1, $1, $2)
    ON CONFLICT (source, id) DO NOTHING
    RETURNING status
)
SELECT status, true FROM inserted
UNION ALL
SELECT status, false
FROM idem_inbox
WHERE source = $1 AND id = $2
  AND NOT EXISTS (SELECT 1 FROM inserted)
