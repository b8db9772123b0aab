// Package storetest is the conformance suite that every idem store passes,
// and the benchmarks they share. A store's own test calls it the way a user
// would use the store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T, now func() time.Time) store.Store {
//			return newIsolatedStore(t, now)
//		})
//	}
//
// Stores that share a transaction with business writes also run ExerciseTx,
// with a Ledger that writes one business row per charge in that transaction.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// NewStore returns an empty store, isolated from every other test's store
// (a fresh schema, file, key prefix or map), whose clock reads now(). The
// store and everything it opened are closed by t.Cleanup.
type NewStore func(t *testing.T, now func() time.Time) store.Store

// Ledger is the business side of the transactional tests: one row per
// charge, written in the store's transaction.
type Ledger[TX any] interface {
	// Charge inserts one business row for id inside tx.
	Charge(ctx context.Context, tx TX, id string) error
	// Charges counts the committed rows for id.
	Charges(ctx context.Context, id string) (int, error)
}

// NewTxStore is NewStore for a transactional store, with a ledger table in
// the same database.
type NewTxStore[TX any] func(t *testing.T, now func() time.Time) (store.TxStore[TX], Ledger[TX])
