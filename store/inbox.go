package store

import (
	"context"
	"errors"
	"time"
)

// ErrCorrupt is returned (wrapped) when the inbox tables disagree with
// themselves, for example a stream row naming a parked sequence whose event
// is not stored. It is never expected; the transaction must roll back.
var ErrCorrupt = errors.New("idem/store: inbox tables are inconsistent")

// EventKey identifies one message: the CloudEvents (source, id) pair. It is
// the inbox's unique key.
type EventKey struct {
	Source string
	ID     string
}

// StreamKey identifies one order stream: the CloudEvents (source, subject)
// pair. Sequences are compared only within one stream.
type StreamKey struct {
	Source  string
	Subject string
}

// EventStatus is the state of an inbox row.
type EventStatus uint8

const (
	// EventDone means the event was handled: applied, parked, or dropped as
	// a duplicate, stale or superseded sequence. Redeliveries are
	// acknowledged without running anything.
	EventDone EventStatus = 1
	// EventDead means the event was dead-lettered: redeliveries are
	// acknowledged, and the dead letter may be requeued.
	EventDead EventStatus = 2
)

// String returns "done" or "dead".
func (s EventStatus) String() string {
	switch s {
	case EventDone:
		return "done"
	case EventDead:
		return "dead"
	}
	return "unknown"
}

// ParkedEvent is a delta event held after a gap until the gap fills.
type ParkedEvent struct {
	Sequence int64
	// Event is the stored event (package inbox stores structured-mode
	// CloudEvents JSON), returned byte for byte.
	Event []byte
}

// DeadLetter is an event that will not be retried by itself: its payload
// was invalid, or a transient failure outlasted the retry budget.
type DeadLetter struct {
	// ID is assigned by the store (increasing) when the dead letter is
	// written; it orders the listing and names the dead letter to Requeue.
	ID       int64
	Key      EventKey
	Stream   StreamKey
	Sequence int64 // 0 when the event carries none
	// Reason is why it was dead-lettered, for the operator.
	Reason string
	// Event is the stored event, returned byte for byte.
	Event []byte
	// Attempts counts the attempts to apply it, over every requeue.
	Attempts    int
	FirstFailed time.Time
	LastFailed  time.Time
}

// GapRecord is a run of sequences a stream found missing. Snapshot streams
// record and skip them (the next snapshot holds the facts); delta streams
// record them and hold the events behind them until they fill or are
// compensated.
type GapRecord struct {
	Stream    StreamKey
	From, To  int64
	Delta     bool
	FirstSeen time.Time
}

// DeadLetterQuery selects dead letters for ListDeadLetters.
type DeadLetterQuery struct {
	// After lists dead letters with ID > After (0: from the first), so that a
	// backlog is walked page by page in constant memory.
	After int64
	// Limit is the page size, at least 1.
	Limit int
}

// InboxStore is the storage of the inbox and of
// per-stream order: inbox rows, stream rows, parked events,
// gaps and dead letters. Every *Tx method runs in the caller's transaction,
// so that the inbox row, the order state and the caller's business writes
// commit together or not at all; methods without Tx run on their own.
//
// Times are the caller's (package inbox passes its clock), so that the
// store keeps no clock of its own for these tables.
type InboxStore[TX any] interface {
	Transactor[TX]

	// RecordEventTx inserts the inbox row key with EventDone and received
	// time at. When the row already exists nothing changes and it returns
	// inserted=false with the row's status. Concurrent transactions
	// recording the same key are serialised: the second waits for the first
	// to commit (then sees its row) or roll back (then inserts).
	RecordEventTx(ctx context.Context, tx TX, key EventKey, at time.Time) (existing EventStatus, inserted bool, err error)

	// LockStreamTx returns the stream's stored state (nil for a new stream)
	// and locks the stream until tx ends, so that two transactions on one
	// stream decide one after the other (a new stream too).
	LockStreamTx(ctx context.Context, tx TX, key StreamKey) (state []byte, err error)

	// PutStreamTx stores the stream's state. gapSince is the FirstSeen of
	// its oldest open gap, zero when none; OverdueStreams selects on it.
	PutStreamTx(ctx context.Context, tx TX, key StreamKey, state []byte, gapSince time.Time) error

	// ParkTx stores a parked event of the stream under its sequence. A
	// sequence parked twice is ErrCorrupt (package order never does it).
	ParkTx(ctx context.Context, tx TX, key StreamKey, ev ParkedEvent) error

	// UnparkTx deletes the parked events seqs of the stream and returns
	// them in the order of seqs. A missing sequence is ErrCorrupt.
	UnparkTx(ctx context.Context, tx TX, key StreamKey, seqs []int64) ([]ParkedEvent, error)

	// DropParkedTx deletes the parked events seqs of the stream (those of a
	// superseded execution); missing ones are ignored.
	DropParkedTx(ctx context.Context, tx TX, key StreamKey, seqs []int64) error

	// RecordGapTx appends a gap to the gap log.
	RecordGapTx(ctx context.Context, tx TX, g GapRecord) error

	// DeadLetterTx sets the inbox row of d.Key to EventDead (inserting it if
	// absent) and stores d under a new ID, which it returns. d.ID is
	// ignored.
	DeadLetterTx(ctx context.Context, tx TX, d DeadLetter) (int64, error)

	// TakeDeadLetterTx deletes dead letter id and returns it, and deletes
	// its inbox row when that row is EventDead (wasDead true), so that the
	// event can be processed again in the same transaction. When the row is
	// EventDone (the event was delivered again after its inbox row expired,
	// and handled) or absent, the row is left alone and wasDead is false.
	// Returns ErrNotFound for an unknown id.
	TakeDeadLetterTx(ctx context.Context, tx TX, id int64) (d DeadLetter, wasDead bool, err error)

	// ListDeadLetters returns up to q.Limit dead letters with ID > q.After,
	// by increasing ID.
	ListDeadLetters(ctx context.Context, q DeadLetterQuery) ([]DeadLetter, error)

	// ListGaps returns up to limit gap records of the stream (all streams
	// when key is nil), oldest first.
	ListGaps(ctx context.Context, key *StreamKey, limit int) ([]GapRecord, error)

	// OverdueStreams returns up to limit streams whose oldest open gap was
	// first seen at or before before, oldest first.
	OverdueStreams(ctx context.Context, before time.Time, limit int) ([]StreamKey, error)

	// SweepInbox deletes up to limit EventDone inbox rows received before
	// before, and up to limit gap records first seen before it, and returns
	// how many rows it deleted in all. EventDead rows stay until their dead
	// letter is taken.
	SweepInbox(ctx context.Context, before time.Time, limit int) (int, error)
}

// InboxPipeliner is implemented by stores that record an event and lock
// its stream in one round trip (PostgreSQL: a pipeline): package inbox
// uses it for ordered events, which need both.
type InboxPipeliner[TX any] interface {
	// RecordEventLockStreamTx is RecordEventTx(key, at) and then
	// LockStreamTx(stream), with their results, in one round trip where
	// it can. The stream is locked whether or not the event was new.
	RecordEventLockStreamTx(ctx context.Context, tx TX, key EventKey, at time.Time, stream StreamKey) (existing EventStatus, inserted bool, state []byte, err error)
}

// InboxCommitRecorder is implemented by stores that can send an event's
// inbox row with the transaction's COMMIT, in its round trip (PostgreSQL:
// a pipeline): package inbox then applies an event of no order (dedup
// only) first and records it at the commit, one round trip less per event.
type InboxCommitRecorder[TX any] interface {
	// RecordEventAtCommitTx queues the insert of key's inbox row (EventDone,
	// received at) to go out with tx's commit, or with its next statement.
	// When the row exists (another transaction recorded the event; one
	// still open is waited for), that commit or statement fails with an
	// error matching ErrDuplicate, and the whole transaction rolls back:
	// the caller's writes never commit for an event recorded before.
	RecordEventAtCommitTx(ctx context.Context, tx TX, key EventKey, at time.Time) error
}

// InboxStreamSetter is implemented by stores that can record an event and
// set its stream's state, when the stream holds the state the caller
// expects, in a statement queued to go out with the transaction's next
// statement or its COMMIT (PostgreSQL: a pipeline; memstore, as the model,
// at the commit). Package inbox uses it for an ordered event whose stream
// state it read in an earlier event's transaction: the event is decided
// before its transaction opens, and the stream is neither locked nor
// written on its own, nor does the record cost a round trip of its own.
type InboxStreamSetter[TX any] interface {
	// RecordEventSetStreamLaterTx queues the insert of key's inbox row
	// (EventDone, received at) and, when the stream's stored state equals
	// expect byte for byte, its replacement by next with no open gap (the
	// caller sets a stream only for an event in order), which locks the
	// stream until tx ends. The statement goes out with tx's next statement
	// or its commit; a transaction that holds the stream's lock or records
	// the event is waited for first. When the event was recorded before, it
	// fails with an error matching ErrDuplicate; when the stream holds
	// another state (or none), with one matching ErrStreamMoved. Either
	// failure fails the statement or the commit it went out with, and the
	// transaction is rolled back whole: the caller's writes never commit
	// without the event's record and its stream's new state.
	//
	// failed reports that failure once the statement has gone out, or
	// the failure that kept it from running: an earlier statement's, or
	// the driver's refusal of the whole pipeline it went out with, which a
	// statement after it may cause (PostgreSQL's pgx refuses a pipeline
	// one of whose statements it cannot prepare or encode); nil before,
	// or when it succeeded. The caller tells by it that its own statement
	// did not run, whatever that statement's error says. A store that runs
	// the statement at once returns its failure as err instead.
	RecordEventSetStreamLaterTx(ctx context.Context, tx TX, key EventKey, at time.Time, stream StreamKey, expect, next []byte) (failed func() error, err error)
}
