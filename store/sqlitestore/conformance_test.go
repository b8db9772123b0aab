package sqlitestore

import (
	"database/sql"
	"testing"
	"time"

	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// open returns a store on a fresh migrated file, with the ledger table
// beside the store's.
func open(t *testing.T, now func() time.Time) storetest.Subject[*sql.Tx] {
	t.Helper()
	db, _ := openMigrated(t, nil)
	s, err := New(db, &Config{Now: now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return storetest.Subject[*sql.Tx]{Store: s, Ledger: newLedger(t, db)}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, open)
}

func TestFlows(t *testing.T) {
	t.Parallel()
	flowtest.Exercise(t, open)
}
