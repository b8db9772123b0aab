package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
)

// t0 is where test clocks start: a round instant, so stored microseconds
// compare equal to clock arithmetic.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// openMigrated opens a fresh file in t's temp dir with cfg, migrates it,
// and closes it at cleanup.
func openMigrated(t testing.TB, cfg *OpenConfig) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := Open(path, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := Migrate(context.Background(), db); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return db, path
}

type bundle struct {
	db    *sql.DB
	path  string
	clock *testclock.Clock
}

// setup returns a store on its own file, with a settable clock at t0.
func setup(t testing.TB) (*Store, *bundle) {
	t.Helper()
	db, path := openMigrated(t, nil)
	clock := testclock.New(t0)
	s, err := New(db, &Config{Now: clock.Now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &bundle{db: db, path: path, clock: clock}
}

// ledger is the business table of the transactional tests, in the store's
// own file.
type ledger struct{ db *sql.DB }

func newLedger(t testing.TB, db *sql.DB) *ledger {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatalf("create ledger: %v", err)
	}
	return &ledger{db: db}
}

func (l *ledger) Charge(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO ledger (id, amount) VALUES (?, 100)`, id)
	return err
}

func (l *ledger) Charges(ctx context.Context, id string) (int, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM ledger WHERE id = ?`, id).Scan(&n)
	return n, err
}
