package sqlitestore

import (
	"database/sql"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

func newConformanceStore(t *testing.T, now func() time.Time) (*Store, *sql.DB) {
	t.Helper()
	db, _ := openMigrated(t, nil)
	s, err := New(db, &Config{Now: now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, db
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, now func() time.Time) store.Store {
		s, _ := newConformanceStore(t, now)
		return s
	})
}

func TestConformanceTx(t *testing.T) {
	t.Parallel()
	storetest.ExerciseTx[*sql.Tx](t, func(t *testing.T, now func() time.Time) (store.TxStore[*sql.Tx], storetest.Ledger[*sql.Tx]) {
		s, db := newConformanceStore(t, now)
		return s, newLedger(t, db)
	})
}
