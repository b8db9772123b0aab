package memstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// The memory store is five values: the request-key records, the inbox,
// the outbox and executions that share the inbox's transactions, and the
// applications. Each is opened on
// its own and runs the sections and flows it serves.
var (
	openRecords storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.New(&memstore.Config{Now: now})}
	}
	openInbox storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.NewInbox(), Ledger: &memLedger{rows: map[string]int{}}}
	}
	openOutbox storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.NewOutbox(memstore.NewInbox()), Ledger: &memLedger{rows: map[string]int{}}}
	}
	openApps storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.NewApps()}
	}
	openDefinitions storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.NewDefinitions()}
	}
	openSecrets storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.NewSecrets()}
	}
	openExecutions storetest.Open[*memstore.Tx] = func(t *testing.T, now func() time.Time) storetest.Subject[*memstore.Tx] {
		return storetest.Subject[*memstore.Tx]{Store: memstore.NewExecutions(memstore.NewInbox()), Ledger: &memLedger{rows: map[string]int{}}}
	}
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, open := range []storetest.Open[*memstore.Tx]{openRecords, openInbox, openOutbox, openExecutions, openApps, openDefinitions, openSecrets} {
		storetest.Exercise(t, open)
	}
}

func TestFlows(t *testing.T) {
	t.Parallel()
	for _, open := range []storetest.Open[*memstore.Tx]{openRecords, openInbox, openExecutions} {
		flowtest.Exercise(t, open)
	}
}

// memLedger is the business table of the memory tests: one count per id,
// written in the inbox's transaction and undone with it.
type memLedger struct {
	mu   sync.Mutex
	rows map[string]int
}

func (l *memLedger) Charge(ctx context.Context, tx *memstore.Tx, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows[id]++
	tx.OnRollback(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.rows[id]--
	})
	return nil
}

func (l *memLedger) Charges(ctx context.Context, id string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rows[id], nil
}
