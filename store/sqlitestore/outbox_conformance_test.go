package sqlitestore

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseOutbox[*sql.Tx](t, func(t *testing.T) (store.OutboxStore[*sql.Tx], storetest.Ledger[*sql.Tx]) {
		s, db := newConformanceStore(t, nil)
		return s, newLedger(t, db)
	})
}
