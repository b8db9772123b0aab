// Package store defines the storage interface behind idem's request keys.
//
// A store keeps one record per key (an opaque byte string built by package
// key from the scope) and performs each state change in one atomic step:
// claim, complete, release, extend, mark unknown, sweep. Every write by a
// claim holder is a compare-and-set on its fence (epoch and owner token): a
// holder that lost its claim gets ErrFenced and changes nothing.
//
// Implementations live in sub-packages (memstore, sqlitestore, pgstore,
// redisstore) and all pass the conformance suite in storetest. This package
// imports no database driver; stores import it, never the other way round.
//
// The record's state machine is drawn in package key's doc.go.
//
// # Stability
//
// The storage interface is experimental: it grows with the concerns
// (request keys, inbox and order, outbox, and executions next) and may
// change between minor versions. Use the stores in this module; a store
// written outside it should run the conformance suite (storetest) of the
// idem version it targets, which is the interface's real contract.
package store

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Stores return them (possibly wrapped) and callers match
// them with errors.Is. Any other error from a store means the store could not
// answer, and the caller must assume nothing about whether a write happened.
var (
	// ErrNotFound is returned by Get when no live record exists for the key
	// (absent, or past its ExpiresAt).
	ErrNotFound = errors.New("idem/store: record not found")

	// ErrFenced is returned by Complete, CompleteTx, Release, Extend and
	// MarkUnknown when the caller's fence (epoch and owner) no longer matches
	// a record in StateProcessing: the lease was taken over by a newer claim,
	// the record was completed or released, or it expired and was swept.
	// Nothing was changed.
	ErrFenced = errors.New("idem/store: fenced: claim is no longer held")

	// ErrDuplicate is returned when a row is created under an ID its owner
	// already used (ExecutionStore's tasks and executions; an event's inbox
	// row recorded at the commit, InboxCommitRecorder). Nothing was
	// written.
	ErrDuplicate = errors.New("idem/store: duplicate id")

	// ErrStreamMoved is returned when an order stream's state is set only
	// if it still holds the state the caller expected
	// (InboxStreamSetter), and it holds another one, or none: another
	// transaction moved it on. The transaction that asked is aborted.
	ErrStreamMoved = errors.New("idem/store: the stream holds another state than expected")
)

// State is the state of a record.
type State uint8

const (
	// StateProcessing means a claim was granted. While LeaseUntil is in the
	// future the holder owns the key; after it, the next claim with the same
	// fingerprint takes the key over with Epoch+1.
	StateProcessing State = 1
	// StateDone means the holder completed the operation; Response holds the
	// stored result until ExpiresAt.
	StateDone State = 2
	// StateReleased means the holder gave the claim back because the
	// operation failed without effect; the next claim takes the key over at
	// once, with any fingerprint, with Epoch+1.
	StateReleased State = 3
)

// String returns the state's name as drawn in the docs.
func (s State) String() string {
	switch s {
	case StateProcessing:
		return "PROCESSING"
	case StateDone:
		return "DONE"
	case StateReleased:
		return "RELEASED"
	default:
		return "UNKNOWN_STATE"
	}
}

// Record is one key's stored state.
type Record struct {
	// Key is the opaque key the record was claimed under.
	Key string
	// Fingerprint identifies the request that claimed the key; a claim with
	// another fingerprint is not granted (except after a release).
	Fingerprint []byte
	// State is the record's state.
	State State
	// Epoch counts claims of this key: 1 for the first claim, plus one at
	// every takeover. It never decreases while the record exists, and a
	// record that expires and is claimed afresh continues from its last
	// epoch when the store still holds it.
	Epoch int64
	// Owner is the token of the claim that holds (or last held) the key, as
	// passed in ClaimParams.Owner. Together with Epoch it is the fence.
	Owner string
	// Unknown is true when the holder reported that the operation's outcome
	// is unknown (MarkUnknown): the claim is kept until LeaseUntil so that
	// nobody repeats the operation before the holder's lease has run out.
	Unknown bool
	// LeaseUntil is when the current claim's lease ends, on the store's
	// clock. Zero unless State is StateProcessing.
	LeaseUntil time.Time
	// ExpiresAt is when the record stops existing for callers; after it the
	// key is new again and the sweeper may delete the record.
	ExpiresAt time.Time
	// Response is the stored result. Set only in StateDone; may be empty.
	Response []byte
}

// Fence identifies one claim. Every write by a holder carries it and is
// applied only if the record still has this Epoch and Owner and is in
// StateProcessing.
type Fence struct {
	Key   string
	Epoch int64
	Owner string
}

// ClaimParams are the arguments to Store.Claim.
type ClaimParams struct {
	// Key is the record's key: an opaque byte string of 1 to 255 bytes,
	// compared bytewise.
	Key string
	// Fingerprint is compared bytewise with the stored one.
	Fingerprint []byte
	// Owner is a token unique to this claim attempt (package key uses 16
	// random bytes). It lets the caller recognise its own claim when the
	// answer to Claim was lost, and fences a holder whose record was swept
	// and claimed afresh.
	Owner string
	// Lease is how long the claim is held, from the store's clock.
	Lease time.Duration
	// Retention is how long the record lives from the claim (and, once
	// completed, from the completion), on the store's clock.
	Retention time.Duration
	// Transactional says that everything the claim's operation does is
	// written in a transaction of this store that completes the claim
	// (CompleteTx; package key's TxGuard). Such a claim need not be on disk
	// before Claim returns: nothing can outlive a crash under it unless
	// that transaction commits, and its commit makes the claim durable
	// with it (the claim's own commit comes first in the log). A store may
	// then skip the claim's own sync (pgstore: synchronous_commit off for
	// it; sqlitestore: synchronous=NORMAL for it, in WAL mode); a crash before the completion may forget the claim, which then
	// never ran anything, instead of leaving it to its lease. Stores that
	// ignore it claim durably, as always.
	Transactional bool
}

// ClaimResult is what Store.Claim answers.
type ClaimResult struct {
	// Claimed is true when the caller now holds the key with Record.Epoch.
	Claimed bool
	// Record is the record after the claim: the new claim when Claimed,
	// otherwise the record that prevented it.
	Record Record
	// Now is the store's clock when it decided, so that callers can compute
	// the time left on a lease (Record.LeaseUntil - Now).
	Now time.Time
}

// CompleteParams are the arguments to Store.Complete and TxStore.CompleteTx.
type CompleteParams struct {
	Fence
	// Response is stored as the record's result.
	Response []byte
	// Retention is how long the completed record lives, from the completion.
	Retention time.Duration
}

// Store is the storage of request-key records. All methods are safe for
// concurrent use and each one is a single atomic step in the store.
//
// A method that returns an error other than the sentinels above may or may
// not have applied its write (a timeout after the server committed, say).
// Callers resolve that by reading the record again (Get), never by repeating
// the operation that the claim protects.
type Store interface {
	// Claim grants the key to the caller, atomically, when one of these holds
	// (checked in this order):
	//   - no record exists, or it is past ExpiresAt (which a live lease
	//     never is, see Extend): a new record in
	//     StateProcessing (Epoch 1, or the old Epoch+1 if the expired record
	//     is still there);
	//   - the record is StateReleased: taken over with Epoch+1 and the new
	//     Fingerprint;
	//   - the fingerprints are equal, the record is StateProcessing and its
	//     lease has ended (LeaseUntil <= now): taken over with Epoch+1,
	//     Unknown cleared.
	// A granted claim sets Owner, LeaseUntil = now+Lease and
	// ExpiresAt = now+Retention. Otherwise (other fingerprint, StateDone, or a
	// live lease) nothing changes and the result carries the record as it is.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)

	// Complete moves a held record to StateDone with the response, clears
	// the lease and Unknown, and sets ExpiresAt = now+Retention. It succeeds
	// even when the lease has ended, as long as nobody took the key over.
	// Returns ErrFenced when the fence does not match.
	Complete(ctx context.Context, p CompleteParams) error

	// Release moves a held record to StateReleased so that the next claim
	// may run the operation again at once. Returns ErrFenced when the fence
	// does not match.
	Release(ctx context.Context, f Fence) error

	// Extend sets LeaseUntil = now+lease on a held record (and raises
	// ExpiresAt to LeaseUntil if it was earlier, so that a live lease never
	// outlives its record) and returns the new LeaseUntil. Returns ErrFenced
	// when the fence does not match.
	Extend(ctx context.Context, f Fence, lease time.Duration) (time.Time, error)

	// MarkUnknown sets Unknown on a held record, keeping its lease: the
	// holder does not know whether the operation took effect. Returns
	// ErrFenced when the fence does not match.
	MarkUnknown(ctx context.Context, f Fence) error

	// Get returns the live record for key, or ErrNotFound.
	Get(ctx context.Context, key string) (Record, error)

	// Sweep deletes up to limit records that are past ExpiresAt and hold no
	// live lease (StateProcessing records whose LeaseUntil is in the future
	// are never deleted), and returns how many it deleted. Stores that
	// expire records by themselves (Redis) return 0, nil.
	Sweep(ctx context.Context, limit int) (int, error)

	// Capabilities describes what the store guarantees.
	Capabilities() Capabilities
}

// Capabilities describes a store's guarantees, so that callers never switch
// on a store's type.
type Capabilities struct {
	// Durable is true when a write that returned nil survives a crash of the
	// store's process and of the machine (fsync before the answer).
	Durable bool
	// Transactions is true when the store implements TxStore.
	Transactions bool
	// Shared is true when several processes may use the same store at once
	// (PostgreSQL, Redis, an SQLite file; not the memory store).
	Shared bool
	// SelfExpiring is true when the store deletes expired records by itself
	// (Redis key TTLs), so that Sweep has nothing to do.
	SelfExpiring bool
}

// Transactor runs a function in one of the store's transactions, which
// every concern's *Tx methods and the caller's own writes share (SQLite:
// *sql.Tx; PostgreSQL: pgx.Tx; memstore: *memstore.Tx). It is declared once
// and embedded by TxStore, InboxStore and OutboxStore, so that one value
// of a SQL store serves them all in one transaction.
type Transactor[TX any] interface {
	// InTx begins a transaction, calls fn with it, and commits when fn
	// returns nil; otherwise it rolls back and returns fn's error. An error
	// from the commit itself leaves the outcome unknown: resolve it by
	// reading (for a request key, Get), never by running fn again.
	InTx(ctx context.Context, fn func(ctx context.Context, tx TX) error) error
}

// TxStore is a store that can share a transaction with the caller's own
// writes (SQLite: *sql.Tx; PostgreSQL: pgx.Tx). The business change and the
// fenced completion then commit together or not at all, which makes a local
// effect happen exactly once.
type TxStore[TX any] interface {
	Store
	Transactor[TX]

	// CompleteTx is Complete inside tx: if tx rolls back, the completion does
	// too. Returns ErrFenced when the fence does not match; the caller must
	// then roll back its business writes.
	CompleteTx(ctx context.Context, tx TX, p CompleteParams) error

	// BeginTx begins a transaction that the caller ends with CommitTx or
	// RollbackTx: always exactly one of them, since a store may hold a lock
	// until then (SQLite's one writer). InTx is BeginTx, fn, then CommitTx
	// or RollbackTx. It is for work that must commit while it goes on (the
	// HTTP middleware commits a handler's writes when its response outgrows
	// what is stored, then streams the rest), which a closure cannot do.
	// If ctx ends first, the transaction is rolled back; RollbackTx must
	// still be called.
	BeginTx(ctx context.Context) (TX, error)
	// CommitTx commits tx. An error leaves the outcome unknown, as InTx's
	// does: resolve it by reading, never by running the work again.
	CommitTx(ctx context.Context, tx TX) error
	// RollbackTx rolls tx back, even if ctx has ended. It is harmless on a
	// transaction that ended already (its context did).
	RollbackTx(ctx context.Context, tx TX) error
}
