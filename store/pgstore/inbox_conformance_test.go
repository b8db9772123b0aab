package pgstore_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// newInbox opens the store on a fresh migrated schema, with the ledger of
// the transactional suite beside it.
func newInbox(t *testing.T) (store.InboxStore[pgx.Tx], storetest.Ledger[pgx.Tx]) {
	t.Helper()
	pool := migratedPool(t)
	return newStore(t, pool, nil), newLedger(t, pool)
}

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseInbox(t, newInbox)
}

func TestInboxFlowConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseInboxFlow(t, newInbox)
}
