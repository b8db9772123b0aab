package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// open returns a store on a fresh migrated schema, with the ledger table
// beside the store's.
func open(t *testing.T, now func() time.Time) storetest.Subject[pgx.Tx] {
	t.Helper()
	pool := migratedPool(t)
	return storetest.Subject[pgx.Tx]{Store: newStore(t, pool, now), Ledger: newLedger(t, pool)}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, open)
}

func TestFlows(t *testing.T) {
	t.Parallel()
	flowtest.Exercise(t, open)
}

// ledger is the business table of the transactional sections, in the
// store's schema: one row per charge.
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
