-- RecordEventTx: the status of an inbox row that was already there.
SELECT status FROM idem_inbox WHERE source = :source AND id = :id
