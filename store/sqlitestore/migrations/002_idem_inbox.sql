-- The event inbox and per-stream order (store.InboxStore): inbox rows,
-- stream rows, parked events, the gap log and dead letters. Times are
-- microseconds since the Unix epoch on the caller's clock, as in
-- idem_keys; a zero time is stored as 0, except the streams' gap_since,
-- which is NULL when the stream has no open gap so that its index holds
-- only the streams that have one. Booleans and statuses are integers.
--
-- Parked events and dead letters are ordinary rowid tables: each row
-- carries a whole event, too large for WITHOUT ROWID to pay (SQLite
-- advises it for rows under a twentieth of a page). The inbox is one too,
-- although its rows are little more than their key: its keys arrive in
-- random order (event ids are usually UUIDs), which leaves a WITHOUT ROWID
-- b-tree partly empty from page splits, and its sweep index would repeat
-- the whole key in every entry instead of a rowid. Measured on 1,000,000
-- inbox rows with a 30-byte source and UUID ids, sweep index included:
-- 181 bytes per row against 173 for WITHOUT ROWID, point reads alike, and
-- inserts 7% to 30% faster; the inbox is inserted into for every event.
-- Stream rows are inserted once per stream, then read and rewritten for
-- its every event, and hold only a small state: WITHOUT ROWID stores their
-- key once, and their one secondary index holds only streams with a gap.

-- +goose Up

-- One row per event (source, id) seen: status 1 done, 2 dead
-- (store.EventStatus). Rows that are done expire after the retention
-- (SweepInbox); dead ones stay until their dead letter is taken.
CREATE TABLE idem_inbox (
    source      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (source, id)
);

-- SweepInbox walks the done rows from the oldest. Partial, so that dead
-- rows, which the sweep never deletes, are neither stored here nor walked
-- over again by every sweep.
CREATE INDEX idem_inbox_sweep ON idem_inbox (received_at) WHERE status = 1;

-- One row per order stream (source, subject): its state, encoded by the
-- caller, and the first-seen time of its oldest open gap (NULL: none).
CREATE TABLE idem_streams (
    source    TEXT    NOT NULL,
    subject   TEXT    NOT NULL,
    state     BLOB    NOT NULL,
    gap_since INTEGER,
    PRIMARY KEY (source, subject)
) WITHOUT ROWID;

-- OverdueStreams reads the streams with an open gap, oldest gap first.
CREATE INDEX idem_streams_gap_since ON idem_streams (gap_since) WHERE gap_since IS NOT NULL;

-- Delta events held behind a gap, under their sequence, until it fills.
CREATE TABLE idem_parked (
    source  TEXT    NOT NULL,
    subject TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    event   BLOB    NOT NULL,
    PRIMARY KEY (source, subject, seq)
);

-- The gap log: every run of missing sequences a stream found, appended by
-- the stream's transaction and expired by SweepInbox. delta is 1 for a
-- delta stream, 0 for a snapshot stream.
CREATE TABLE idem_gaps (
    id         INTEGER PRIMARY KEY,
    source     TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    from_seq   INTEGER NOT NULL,
    to_seq     INTEGER NOT NULL,
    delta      INTEGER NOT NULL,
    first_seen INTEGER NOT NULL
);

-- ListGaps of all streams and SweepInbox walk this one, oldest first;
-- ListGaps of one stream the next.
CREATE INDEX idem_gaps_first_seen ON idem_gaps (first_seen);
CREATE INDEX idem_gaps_stream ON idem_gaps (source, subject, first_seen);

-- Dead letters, listed and requeued by id. AUTOINCREMENT, so that ids
-- only grow and are never reused after a dead letter is taken: an
-- operator's listing (ListDeadLetters after an id) and a Requeue by id
-- can never name another event than the one they saw.
CREATE TABLE idem_dead_letters (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    source         TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    stream_source  TEXT    NOT NULL,
    stream_subject TEXT    NOT NULL,
    seq            INTEGER NOT NULL,
    reason         TEXT    NOT NULL,
    event          BLOB    NOT NULL,
    attempts       INTEGER NOT NULL,
    first_failed   INTEGER NOT NULL,
    last_failed    INTEGER NOT NULL
);

-- +goose Down
DROP TABLE idem_dead_letters;
DROP TABLE idem_gaps;
DROP TABLE idem_parked;
DROP TABLE idem_streams;
DROP TABLE idem_inbox;
