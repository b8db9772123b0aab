-- LockStreamTx: lock the stream's row and read its state or, for a stream
-- without a row, insert a placeholder (NULL state, no gap) that its insert
-- keeps locked until the transaction ends. One statement, so that a new
-- stream costs the round trip an existing one does. Parameters: $1 source,
-- $2 subject. Returns one row, the state (NULL: a new stream), or none.
--
-- An existing row: under READ COMMITTED the row lock waits for a
-- transaction holding it and then returns the row's latest version, so
-- the waiter sees the state the holder stored; the insert does nothing.
-- No row: the insert takes the stream. A transaction inserting the same
-- new stream meanwhile makes the insert wait, on the primary key, until
-- it ends: if it rolled back the insert goes ahead; if it committed
-- nothing is inserted and no row is returned (the row is not in this
-- statement's snapshot), and the caller runs the statement again, which
-- locks the committed row.
WITH locked AS (
    SELECT state
    FROM idem_streams
    WHERE source = $1 AND subject = $2
    FOR UPDATE
), inserted AS (
    INSERT INTO idem_streams (source, subject)
    SELECT $1, $2
    WHERE NOT EXISTS (SELECT 1 FROM locked)
    ON CONFLICT (source, subject) DO NOTHING
    RETURNING state
)
SELECT state FROM locked
UNION ALL
SELECT state FROM inserted
