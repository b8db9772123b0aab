package store

import (
	"context"
	"time"
)

// IntentState is the state of an outbox row.
type IntentState uint8

const (
	// IntentPending: waiting to be delivered at DueAt (first attempt or a
	// retry), or claimed by a relay whose lease has ended.
	IntentPending IntentState = 1
	// IntentInFlight: claimed by a relay until LeaseUntil.
	IntentInFlight IntentState = 2
	// IntentDone: delivered (or found already done by Read-Verify-Write, or
	// completed with a client error as data). Final.
	IntentDone IntentState = 3
	// IntentDead: out of budget, or failed for good; kept for the operator,
	// who may requeue it.
	IntentDead IntentState = 4
)

// String returns the state's name.
func (s IntentState) String() string {
	switch s {
	case IntentPending:
		return "pending"
	case IntentInFlight:
		return "in_flight"
	case IntentDone:
		return "done"
	case IntentDead:
		return "dead"
	}
	return "unknown"
}

// Intent is an outbound effect to perform: written in the business
// transaction (EnqueueTx), delivered later by a relay.
type Intent struct {
	// ID is assigned by the store, increasing in enqueue order.
	ID int64
	// Target names the configured target (base URL, key template, policy).
	Target string
	// Method and Path of the request; Path is appended to the target's URL.
	Method string
	Path   string
	// Body is sent as is; Payload-reading key templates parse it as JSON.
	Body []byte
	// Headers are sent with every attempt (Content-Type among them).
	Headers map[string]string
	// Metadata is business data for the key template (as "metadata"), not
	// sent.
	Metadata map[string]string
	// Stream, when not empty, orders delivery: one row of a stream at a
	// time, in enqueue order, each after the previous one ended (done or
	// dead).
	Stream string
	// Sequence is the row's position in its stream (from 1), assigned by
	// EnqueueTx; 0 without a stream. Signed callbacks send it as the
	// CloudEvents sequence.
	Sequence int64

	// The delivery state, kept by the store.
	State      IntentState
	Attempts   int
	DueAt      time.Time
	Epoch      int64
	Owner      string
	LeaseUntil time.Time
	// LastError says why the last attempt did not finish (a status, a
	// timeout), or why the intent is dead.
	LastError string
	// Status is the final HTTP status (IntentDone), 0 when none.
	Status     int
	EnqueuedAt time.Time
	DoneAt     time.Time
}

// IntentFence identifies one claim of an intent: every result a relay
// records carries it and is applied only if the row is still in flight with
// this Epoch and Owner. A relay paused past its lease is fenced.
type IntentFence struct {
	ID    int64
	Epoch int64
	Owner string
}

// Fence returns the intent's current fence.
func (in Intent) Fence() IntentFence { return IntentFence{ID: in.ID, Epoch: in.Epoch, Owner: in.Owner} }

// OutboxClaim are the arguments of ClaimIntents.
type OutboxClaim struct {
	// Owner is the relay's token for this claim (unique per claim).
	Owner string
	// Now is the relay's clock; due and lease times compare to it.
	Now time.Time
	// Lease is how long the claimed rows are held.
	Lease time.Duration
	// Limit is the most rows claimed, at least 1.
	Limit int
	// Skip are targets not to claim (disabled ones).
	Skip []string
}

// OutboxStore is the storage of outbound intents.
// EnqueueTx runs in the caller's business transaction, so an intent exists
// if and only if its business change committed. The other methods run on
// their own and are single atomic steps; every result a relay records is
// fenced by the claim's epoch and owner.
type OutboxStore[TX any] interface {
	// Transactor runs the caller's business writes and EnqueueTx in one
	// transaction.
	Transactor[TX]

	// EnqueueTx writes in (Target, Method, Path, Body, Headers, Metadata,
	// Stream) as pending, due at in.DueAt (zero: at once), in tx, and
	// returns its ID and, for a stream, its Sequence.
	EnqueueTx(ctx context.Context, tx TX, in Intent) (id, seq int64, err error)

	// ClaimIntents claims up to c.Limit due intents, oldest first: pending
	// with DueAt <= c.Now, or in flight with LeaseUntil <= c.Now (a relay
	// died holding it). A stream's row is claimable only when every earlier
	// row of the stream is done or dead. Each claimed row gets Epoch+1,
	// Attempts+1 (a claim is an attempt, so a relay that dies on a row still
	// spends its budget), Owner, LeaseUntil = Now+Lease, state in flight.
	// Several relays may claim at once: a row goes to one of them.
	ClaimIntents(ctx context.Context, c OutboxClaim) ([]Intent, error)

	// CompleteIntent records a delivery's end: done with the HTTP status.
	// ErrFenced when the fence no longer matches an in-flight row.
	CompleteIntent(ctx context.Context, f IntentFence, status int, at time.Time) error

	// RetryIntent puts the row back to pending, due at dueAt, with the
	// error. ErrFenced as above.
	RetryIntent(ctx context.Context, f IntentFence, dueAt time.Time, lastErr string) error

	// KillIntent makes the row dead with the reason. ErrFenced as above.
	KillIntent(ctx context.Context, f IntentFence, reason string, at time.Time) error

	// GetIntent returns one intent, or ErrNotFound.
	GetIntent(ctx context.Context, id int64) (Intent, error)

	// ListIntents returns up to limit intents in state with ID > after, by
	// ID (paging in constant memory).
	ListIntents(ctx context.Context, state IntentState, after int64, limit int) ([]Intent, error)

	// RequeueIntent makes a dead intent pending again, due now, its attempts
	// reset to 0 (a new budget). ErrNotFound when id is not dead.
	RequeueIntent(ctx context.Context, id int64, now time.Time) error

	// DisableTarget records that the target answered 410 Gone: relays stop
	// claiming its rows (they stay pending) until EnableTarget.
	DisableTarget(ctx context.Context, target, reason string, at time.Time) error
	// EnableTarget removes the mark.
	EnableTarget(ctx context.Context, target string) error
	// DisabledTargets lists the disabled targets.
	DisabledTargets(ctx context.Context) ([]string, error)

	// SweepIntents deletes up to limit done intents that ended before
	// before, and returns how many.
	SweepIntents(ctx context.Context, before time.Time, limit int) (int, error)
}

// OutboxWaker is implemented by stores that can tell a relay that intents
// were committed, so that it sleeps instead of polling (PostgreSQL: LISTEN
// and NOTIFY, the notification sent by EnqueueTx's transaction when it
// commits). The channel receives a value, coalesced, after each commit of
// enqueued intents, and is closed when ctx ends or the listening
// connection fails (the relay then falls back to polling and may call
// again).
type OutboxWaker interface {
	OutboxWakeups(ctx context.Context) (<-chan struct{}, error)
}

// OutboxBatcher is implemented by stores that record many completions at
// once, in one round trip and one commit (PostgreSQL: a pipeline in one
// implicit transaction): a relay records the intents a batch delivered so.
type OutboxBatcher interface {
	// CompleteIntents completes each fenced intent with its status, as
	// CompleteIntent does, and returns each one's error: ErrFenced for an
	// intent whose fence no longer holds, which changes nothing of the
	// others. err is for the whole (then nothing was completed).
	CompleteIntents(ctx context.Context, fences []IntentFence, statuses []int, at time.Time) (errs []error, err error)
}
