package pgstore_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// start is the test clock's first reading: a whole second, far from the
// server's clock, so that a statement that read the wrong clock shows.
var start = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// testBundle is what setup returns besides the store.
type testBundle struct {
	pool  *pgxpool.Pool
	clock *testclock.Clock
}

// setup returns a store on a fresh, migrated schema whose clock is
// bundle.clock.
func setup(t testing.TB) (*pgstore.Store, *testBundle) {
	t.Helper()
	clock := testclock.New(start)
	pool := migratedPool(t)
	return newStore(t, pool, clock.Now), &testBundle{pool: pool, clock: clock}
}

// migratedPool returns a pool on a fresh schema with the store's migrations
// applied.
func migratedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}

func newStore(t testing.TB, pool *pgxpool.Pool, now func() time.Time) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, &pgstore.Config{Now: now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// token returns 16 random bytes, like the owner tokens of package key: not
// valid UTF-8, as likely as not.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return string(b)
}

// params returns claim parameters for key with a fresh owner.
func params(key, fingerprint string) store.ClaimParams {
	return store.ClaimParams{
		Key:         key,
		Fingerprint: []byte(fingerprint),
		Owner:       token(),
		Lease:       30 * time.Second,
		Retention:   24 * time.Hour,
	}
}

func mustClaim(t testing.TB, s store.Store, p store.ClaimParams) store.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatalf("Claim(%q): %v", p.Key, err)
	}
	return res
}

func fenceOf(r store.ClaimResult) store.Fence {
	return store.Fence{Key: r.Record.Key, Epoch: r.Record.Epoch, Owner: r.Record.Owner}
}
