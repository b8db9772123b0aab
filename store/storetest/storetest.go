// Package storetest is the conformance suite of idem's storage interfaces:
// the contract every store passes, checked by calling the store directly.
// A store's test hands it a way to open the store, and the suite runs every
// section whose interface the store's value implements:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T, now func() time.Time) storetest.Subject[*sql.Tx] {
//			db := openMigratedDB(t)
//			return storetest.Subject[*sql.Tx]{Store: newStore(t, db, now), Ledger: newLedger(t, db)}
//		})
//	}
//
// The sections, by interface:
//   - store.Store: the request-key records: fencing, leases, expiry, the
//     sweep, concurrent claims, and a random walk held to the model of the
//     record's state machine;
//   - store.TxStore[TX]: the fenced completion in the caller's transaction;
//   - store.InboxStore[TX]: the inbox and per-stream order tables;
//   - store.OutboxStore[TX]: the outbound intents.
//
// A store cannot skip a section it implements, and a value that has a
// section's methods with another transaction type fails the suite instead
// of skipping it quietly. The next concern's interface gets its section
// the same way, in Exercise.
//
// The suite imports package store only (and the test clock): how idem's
// own packages use a store (key.Guard, inbox.Processor) is checked on every
// store by package flowtest, which is not part of the contract.
package storetest

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// Open returns a new, empty store, isolated from every other test's (a
// fresh schema, file, key prefix or map), and closes everything it opened
// with t.Cleanup. The store reads its clock from now; nil means the store's
// own clock (the inbox and outbox sections pass nil: their methods take
// the caller's times).
type Open[TX any] func(t *testing.T, now func() time.Time) Subject[TX]

// Subject is a store under test and what the sections need beside it. TX
// is the store's transaction type (SQLite: *sql.Tx; PostgreSQL: pgx.Tx); a
// store that shares no transaction uses any.
type Subject[TX any] struct {
	// Store is the value under test: a store.Store, a store.TxStore[TX], a
	// store.InboxStore[TX], a store.OutboxStore[TX], or several of them.
	Store any
	// Ledger is a business table in the store's database whose Charge joins
	// the store's transactions. The sections of TxStore, InboxStore and
	// OutboxStore need it; a store without transactions leaves it nil.
	Ledger Ledger[TX]
}

// Ledger is the business side of the transactional sections: one row per
// charge, written in the store's transaction.
type Ledger[TX any] interface {
	// Charge inserts one business row for id inside tx.
	Charge(ctx context.Context, tx TX, id string) error
	// Charges counts the committed rows for id.
	Charges(ctx context.Context, id string) (int, error)
}

// Exercise runs, each as a parallel subtest named after its interface,
// every section whose interface the store that open returns implements. It
// fails when the store implements none of them, when a section that needs
// the ledger has none, and when the store reports transactions that it
// does not share as a store.TxStore[TX].
func Exercise[TX any](t *testing.T, open Open[TX]) {
	t.Helper()
	probe := open(t, nil)
	if s, ok := probe.Store.(store.Store); ok && s.Capabilities().Transactions && !Implements[store.TxStore[TX]](t, s) {
		t.Fatalf("%T reports Capabilities.Transactions but is no store.TxStore[%v]", s, reflect.TypeFor[TX]())
	}
	sections := []struct {
		name   string
		is     bool // the store implements the section's interface
		ledger bool // the section needs Subject.Ledger
		run    func(*testing.T, Open[TX])
	}{
		{"Store", Implements[store.Store](t, probe.Store), false, exerciseRecords[TX]},
		{"TxStore", Implements[store.TxStore[TX]](t, probe.Store), true, exerciseTx[TX]},
		{"InboxStore", Implements[store.InboxStore[TX]](t, probe.Store), true, exerciseInbox[TX]},
		{"OutboxStore", Implements[store.OutboxStore[TX]](t, probe.Store), true, exerciseOutbox[TX]},
		{"ExecutionStore", Implements[store.ExecutionStore[TX]](t, probe.Store), true, exerciseExecutions[TX]},
		{"AppStore", Implements[store.AppStore](t, probe.Store), false, exerciseApps[TX]},
		{"DefinitionStore", Implements[store.DefinitionStore](t, probe.Store), false, exerciseDefinitions[TX]},
		{"TriggerStore", Implements[store.TriggerStore[TX]](t, probe.Store), false, exerciseTriggers[TX]},
		{"SecretStore", Implements[store.SecretStore](t, probe.Store), false, exerciseSecrets[TX]},
		{"StepStore", Implements[store.StepStore[TX]](t, probe.Store) && Implements[store.ExecutionStore[TX]](t, probe.Store), false, exerciseSteps[TX]},
	}
	ran := 0
	for _, s := range sections {
		if !s.is {
			continue
		}
		if s.ledger && probe.Ledger == nil {
			t.Fatalf("%T is a %s: its Subject needs a Ledger", probe.Store, s.name)
		}
		ran++
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t, open)
		})
	}
	if ran == 0 {
		t.Fatalf("%T implements none of the storage interfaces", probe.Store)
	}
}

// Implements reports whether v implements the interface I. It fails t when
// v has every method of I by name but not all with I's types (most likely
// a store whose transaction type is not the TX it was exercised with),
// so that a section is never skipped for a mistyped TX.
func Implements[I any](t testing.TB, v any) bool {
	t.Helper()
	if _, ok := v.(I); ok {
		return true
	}
	it, vt := reflect.TypeFor[I](), reflect.TypeOf(v)
	if vt == nil {
		return false
	}
	for m := range it.Methods() {
		if _, ok := vt.MethodByName(m.Name); !ok {
			return false
		}
	}
	t.Fatalf("%v has every method of %v, but not with its types: is its transaction type the TX it is exercised with?", vt, it)
	return false
}

// OpenAs opens a store for one test with open and returns it as S, with
// its ledger. It fails t when the store is no S.
func OpenAs[S any, TX any](t *testing.T, open Open[TX], now func() time.Time) (S, Ledger[TX]) {
	t.Helper()
	sub := open(t, now)
	s, ok := sub.Store.(S)
	if !ok {
		t.Fatalf("open returned %T, which is no %v", sub.Store, reflect.TypeFor[S]())
	}
	return s, sub.Ledger
}

// onOwnClock returns a function that opens a store as S for one test, on
// the store's own clock: for the sections whose methods take the caller's
// times.
func onOwnClock[S, TX any](open Open[TX]) func(*testing.T) (S, Ledger[TX]) {
	return func(t *testing.T) (S, Ledger[TX]) {
		t.Helper()
		return OpenAs[S](t, open, nil)
	}
}

// Concurrently calls fn(0) to fn(n-1), each in a goroutine of its own, all
// released at once, and returns when every call has returned.
func Concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}
