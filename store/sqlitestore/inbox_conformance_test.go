package sqlitestore

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseInbox[*sql.Tx](t, func(t *testing.T) (store.InboxStore[*sql.Tx], storetest.Ledger[*sql.Tx]) {
		s, db := newConformanceStore(t, nil)
		return s, newLedger(t, db)
	})
}

func TestInboxFlowConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseInboxFlow[*sql.Tx](t, func(t *testing.T) (store.InboxStore[*sql.Tx], storetest.Ledger[*sql.Tx]) {
		s, db := newConformanceStore(t, nil)
		return s, newLedger(t, db)
	})
}
