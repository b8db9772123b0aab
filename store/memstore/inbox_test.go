package memstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest"
)

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

func newInbox(t *testing.T) (store.InboxStore[*memstore.Tx], storetest.Ledger[*memstore.Tx]) {
	return memstore.NewInbox(), &memLedger{rows: map[string]int{}}
}

func TestInboxConformance(t *testing.T) {
	storetest.ExerciseInbox(t, newInbox)
}

func TestInboxFlowConformance(t *testing.T) {
	storetest.ExerciseInboxFlow(t, newInbox)
}

func TestOutboxConformance(t *testing.T) {
	storetest.ExerciseOutbox(t, func(t *testing.T) (store.OutboxStore[*memstore.Tx], storetest.Ledger[*memstore.Tx]) {
		return memstore.NewOutbox(memstore.NewInbox()), &memLedger{rows: map[string]int{}}
	})
}
