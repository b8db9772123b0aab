package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, now func() time.Time) store.Store {
		return newStore(t, migratedPool(t), now)
	})
}

func TestConformanceTx(t *testing.T) {
	t.Parallel()
	storetest.ExerciseTx(t, func(t *testing.T, now func() time.Time) (store.TxStore[pgx.Tx], storetest.Ledger[pgx.Tx]) {
		pool := migratedPool(t)
		return newStore(t, pool, now), newLedger(t, pool)
	})
}

// ledger is the business table of the transactional suite, in the store's
// schema: one row per charge.
type ledger struct{ pool *pgxpool.Pool }

func newLedger(t *testing.T, pool *pgxpool.Pool) ledger {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		CREATE TABLE ledger (
			id         text        NOT NULL,
			charged_at timestamptz NOT NULL DEFAULT clock_timestamp()
		)`)
	if err != nil {
		t.Fatalf("create ledger: %v", err)
	}
	return ledger{pool: pool}
}

func (l ledger) Charge(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, id)
	return err
}

func (l ledger) Charges(ctx context.Context, id string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE id = $1`, id).Scan(&n)
	return n, err
}
