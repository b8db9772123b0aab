package pgstore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// newOutbox opens the store on a fresh migrated schema, with the ledger of
// the transactional suite beside it.
func newOutbox(t *testing.T) (store.OutboxStore[pgx.Tx], storetest.Ledger[pgx.Tx]) {
	t.Helper()
	pool := migratedPool(t)
	return newStore(t, pool, nil), newLedger(t, pool)
}

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseOutbox(t, newOutbox)
}
