-- LockStreamTx: the stream's state. The caller's transaction holds the
-- database's write lock already (BEGIN IMMEDIATE), which is the stream's
-- lock in SQLite.
SELECT state FROM idem_streams WHERE source = :source AND subject = :subject
