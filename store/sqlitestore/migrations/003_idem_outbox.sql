-- The outbox (store.OutboxStore): outbound intents, written in the
-- caller's business transaction and delivered later by relays, the last
-- sequence of every ordered stream, and the targets disabled after a 410.
-- Times are microseconds since the Unix epoch on the caller's clock, as in
-- idem_keys; a zero time is stored as 0. state is store.IntentState:
-- 1 pending, 2 in flight, 3 done, 4 dead.
--
-- A claim walks the rows it may take in id order and stops at its limit.
-- So that it never walks over a backlog it may not take, a row that
-- cannot be claimed for a while is held out of that walk (hold):
--
--   0  in the walk: the pending rows that are, as far as the store knows,
--      due and first in their stream, and the in-flight rows whose lease
--      ended;
--   1  waiting for a time: a pending row for its due time (a retry's
--      backoff, a row scheduled later), an in-flight row for the end of
--      its lease. The claim first moves the rows whose time came into the
--      walk, oldest first, up to a batch per claim;
--   2  behind an earlier pending or in-flight row of its stream: released
--      by trigger idem_outbox_next when the row before it ends;
--   3  of a disabled target: released by EnableTarget; a claim that does
--      not skip the target finds these rows through their own index.
--
-- hold only decides where a claim looks: the claim checks every condition
-- (due, target, stream order) on every row it takes, so a row in the walk
-- that should wait costs a step, never a wrong claim (see
-- TestOutboxMeasure in outbox_test.go for what a claim costs in front of
-- a backlog it may not take).
--
-- Every index of idem_outbox is partial, so that each holds only the rows
-- of the question it answers, and none of them the done rows (the bulk of
-- the table until they are swept) but the sweep's.

-- +goose Up

-- The last sequence given out in each stream, so that sequences keep
-- growing after a stream's rows were swept (a receiver that deduplicates
-- by sequence must never see one twice). One small row per stream ever
-- used; EnqueueTx bumps it in the caller's transaction.
CREATE TABLE idem_outbox_streams (
    stream   TEXT    NOT NULL PRIMARY KEY,
    last_seq INTEGER NOT NULL
) WITHOUT ROWID;

-- Targets that answered 410 Gone, until an operator enables them again.
CREATE TABLE idem_outbox_targets (
    target      TEXT    NOT NULL PRIMARY KEY,
    reason      TEXT    NOT NULL,
    disabled_at INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per intent. id is AUTOINCREMENT, so that ids only grow and are
-- never reused after a sweep: a fence, a listing page or a requeue by id
-- can never name another intent than the one it saw. stream is NULL for
-- an intent outside any stream (keeping it out of the stream index), and
-- seq is then 0. The short columns come first and the request's headers,
-- metadata and body last: a claim or a fenced update reads the row's
-- state without loading a body that spilled onto overflow pages. headers
-- and metadata are JSON objects, NULL when empty.
CREATE TABLE idem_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    state       INTEGER NOT NULL,
    hold        INTEGER NOT NULL DEFAULT 0,
    target      TEXT    NOT NULL,
    stream      TEXT,
    seq         INTEGER NOT NULL DEFAULT 0,
    due_at      INTEGER NOT NULL,
    lease_until INTEGER NOT NULL DEFAULT 0,
    epoch       INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,
    owner       TEXT    NOT NULL DEFAULT '',
    status      INTEGER NOT NULL DEFAULT 0,
    enqueued_at INTEGER NOT NULL,
    done_at     INTEGER NOT NULL DEFAULT 0,
    method      TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    last_error  TEXT    NOT NULL DEFAULT '',
    headers     TEXT,
    metadata    TEXT,
    body        BLOB    NOT NULL
);

-- The claim's walk. Its one column is the same in every entry, so the
-- entries are in rowid (id) order: an equality search reads them oldest
-- first, a few bytes each.
CREATE INDEX idem_outbox_claim ON idem_outbox (hold) WHERE state IN (1, 2) AND hold = 0;

-- Rows waiting for their due time, and in-flight rows for the end of
-- their lease, by time.
CREATE INDEX idem_outbox_wait ON idem_outbox (due_at) WHERE state = 1 AND hold = 1;
CREATE INDEX idem_outbox_lease ON idem_outbox (lease_until) WHERE state = 2 AND hold = 1;

-- Rows of disabled targets, by target, then id.
CREATE INDEX idem_outbox_disabled ON idem_outbox (target) WHERE hold = 3;

-- The pending and in-flight rows of each stream, by id: whether a row has
-- one before it (claim, enqueue, requeue), and which comes next when one
-- ends (trigger idem_outbox_next). state is there only to cover the
-- statements' repetition of the WHERE, so that they never read the table.
CREATE INDEX idem_outbox_stream ON idem_outbox (stream, id, state)
WHERE state IN (1, 2) AND stream IS NOT NULL;

-- ListIntents of pending, in-flight and dead rows, by state, then id.
-- (Done rows are listed through the table, which they fill.) The WHERE is
-- an inequality, not state IN (1, 2, 4): repeated in a query, an IN could
-- be chosen to drive the search, which then sorts its three ranges.
CREATE INDEX idem_outbox_state ON idem_outbox (state) WHERE state <> 3;

-- SweepIntents deletes done rows from the oldest end.
CREATE INDEX idem_outbox_sweep ON idem_outbox (done_at) WHERE state = 3;

-- When a row of a stream ends (done or dead), the next pending row of the
-- stream, if it was held behind it, joins the claim's walk: at once if it
-- is due by the end time, else once due; or waits with its target's other
-- rows if the target is disabled. A trigger, so that the completion stays
-- one statement, and whatever ends a row releases the next.
-- +goose StatementBegin
CREATE TRIGGER idem_outbox_next AFTER UPDATE OF state ON idem_outbox
WHEN old.state IN (1, 2) AND new.state IN (3, 4) AND new.stream IS NOT NULL
BEGIN
    UPDATE idem_outbox
    SET hold = CASE
        WHEN target IN (SELECT target FROM idem_outbox_targets) THEN 3
        WHEN due_at > new.done_at THEN 1
        ELSE 0
    END
    WHERE hold = 2 AND id = (
        SELECT min(id) FROM idem_outbox
        WHERE stream = new.stream AND state IN (1, 2)
    );
END;
-- +goose StatementEnd

-- +goose Down
DROP TABLE idem_outbox;
DROP TABLE idem_outbox_targets;
DROP TABLE idem_outbox_streams;
